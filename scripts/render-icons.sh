#!/usr/bin/env bash
# Renders assets/icons/agentloom.svg to the PNG sizes desktop entries, the AppImage and the
# window use (assets/icons/agentloom-SIZE.png), and the Windows icon (agentloom.ico: the exe's
# and the installer's). Run it after editing the SVG; the results are kept in the repository
# so that packaging needs no SVG renderer.
# Needs: rsvg-convert (Debian: librsvg2-bin), convert (imagemagick).
set -euo pipefail
cd "$(dirname "$0")/../assets/icons"
for size in 16 32 48 64 128 256 512; do
    rsvg-convert -w "$size" -h "$size" agentloom.svg -o "agentloom-$size.png"
done
convert agentloom-16.png agentloom-32.png agentloom-48.png agentloom-64.png agentloom-128.png \
    agentloom-256.png agentloom.ico
