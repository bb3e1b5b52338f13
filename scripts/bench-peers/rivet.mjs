// Rivet (`@ironclad/rivet-node`) on the graphs scripts/bench-peers.py times. One process
// per figure, the project written as a file and loaded from it as a user's would be:
//   node rivet.mjs start          a one-node graph, run once
//   node rivet.mjs chain N        N passthrough nodes in a chain, run once
//   node rivet.mjs fanout N MS    N delay nodes of MS ms after one text node, run once
// Prints {"run_ms": …}: the run itself, after loading.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(path.resolve(process.env.NODE_PATH || ".", "noop.js"));
const Rivet = require("@ironclad/rivet-node");

const GRAPH = "benchGraph";

function node(id, type, data) {
  return { id, type, title: id, description: "", visualData: { x: 0, y: 0, width: 200 }, data };
}

function wire(from, to) {
  return { outputNodeId: from, outputId: "output1", inputNodeId: to, inputId: "input1" };
}

function output(id, from) {
  return [
    node(id, "graphOutput", { id, dataType: "string" }),
    { outputNodeId: from, outputId: "output1", inputNodeId: id, inputId: "value" },
  ];
}

function graph(kind, n, ms) {
  const nodes = [node("n0", "text", { text: "1" })];
  const connections = [];
  const first = { outputNodeId: "n0", outputId: "output", inputNodeId: "", inputId: "input1" };
  if (kind === "chain") {
    for (let i = 1; i < n; i++) {
      nodes.push(node(`n${i}`, "passthrough", {}));
      connections.push(i === 1 ? { ...first, inputNodeId: "n1" } : wire(`n${i - 1}`, `n${i}`));
    }
    if (n > 1) {
      const [out, c] = output("out", `n${n - 1}`);
      nodes.push(out);
      connections.push(c);
    }
  } else if (kind === "fanout") {
    for (let i = 0; i < n; i++) {
      nodes.push(node(`d${i}`, "delay", { delay: ms }));
      connections.push({ ...first, inputNodeId: `d${i}` });
      const [out, c] = output(`o${i}`, `d${i}`);
      nodes.push(out);
      connections.push(c);
    }
  }
  return { metadata: { id: GRAPH, name: kind, description: "" }, nodes, connections };
}

async function main() {
  const [kind, a, b] = process.argv.slice(2);
  const n = kind === "start" ? 1 : Number(a);
  const project = {
    metadata: { id: "bench", title: "bench", description: "", mainGraphId: GRAPH },
    graphs: { [GRAPH]: graph(kind === "start" ? "chain" : kind, n, Number(b)) },
    plugins: [],
  };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "rivet-bench-"));
  const file = path.join(dir, "bench.rivet-project");
  fs.writeFileSync(file, Rivet.serializeProject(project));
  const loaded = await Rivet.loadProjectFromFile(file);
  const started = process.hrtime.bigint();
  await Rivet.runGraph(loaded, { graph: GRAPH, inputs: {} });
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  fs.rmSync(dir, { recursive: true, force: true });
  process.stdout.write(JSON.stringify({ run_ms: ms }) + "\n");
  process.exit(0);
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});
