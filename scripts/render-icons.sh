#!/usr/bin/env bash
# Renders assets/icons/agentloom.svg to the PNG sizes desktop entries, the AppImage and the
# window use (assets/icons/agentloom-SIZE.png). Run it after editing the SVG; the PNGs are
# kept in the repository so that packaging needs no SVG renderer.
# Needs: rsvg-convert (Debian: librsvg2-bin).
set -euo pipefail
cd "$(dirname "$0")/../assets/icons"
for size in 16 32 48 64 128 256 512; do
    rsvg-convert -w "$size" -h "$size" agentloom.svg -o "agentloom-$size.png"
done
