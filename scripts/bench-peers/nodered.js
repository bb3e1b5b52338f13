// Node-RED, embedded, on the graphs scripts/bench-peers.py times. One process per figure:
//   node nodered.js start              a one-node flow, run once
//   node nodered.js chain N            N function nodes (`return msg;`) in a chain, run once
//   node nodered.js fanout N MS        N delay nodes of MS ms after one inject, run once
//   node nodered.js serve PORT         http-in -> function -> http-response for the Agent
//                                      Protocol's task and step requests, until killed
// The flow is handed to the runtime in memory (no editor, no files but the user dir).
"use strict";

const fs = require("fs");
const http = require("http");
const os = require("os");
const path = require("path");

const RED = require("node-red");

function nodes(flow) {
  return flow.map((node) => ({ z: "flow", ...node }));
}

function chainFlow(n) {
  const flow = [{ id: "flow", type: "tab", label: "bench" }];
  for (let i = 0; i < n; i++) {
    flow.push({
      id: `n${i}`,
      type: "function",
      func: "return msg;",
      outputs: 1,
      wires: [[i + 1 < n ? `n${i + 1}` : "done"]],
    });
  }
  flow.push({ id: "done", type: "function", func: "global.get('done')(msg); return null;", outputs: 1, wires: [[]] });
  return flow;
}

function fanoutFlow(n, ms) {
  const flow = [{ id: "flow", type: "tab", label: "bench" }];
  const delays = [];
  for (let i = 0; i < n; i++) {
    delays.push(`d${i}`);
    flow.push({
      id: `d${i}`,
      type: "delay",
      pauseType: "delay",
      timeout: String(ms),
      timeoutUnits: "milliseconds",
      rate: "1",
      nbRateUnits: "1",
      rateUnits: "second",
      randomFirst: "1",
      randomLast: "5",
      randomUnits: "seconds",
      drop: false,
      outputs: 1,
      wires: [["done"]],
    });
  }
  flow.push({ id: "n0", type: "function", func: "return msg;", outputs: 1, wires: [delays] });
  flow.push({
    id: "done",
    type: "function",
    func: `const seen = (context.get('seen') || 0) + 1; context.set('seen', seen); if (seen === ${n}) { global.get('done')(msg); } return null;`,
    outputs: 1,
    wires: [[]],
  });
  return flow;
}

// The two Agent Protocol requests `agentloom serve` answers, done the same way: a task with
// an id and a folder of its own, then its one step echoing the input.
function serveFlow(tasksDir) {
  const create = `
const fs = global.get('fs'); const path = global.get('path'); const crypto = global.get('crypto');
const id = crypto.randomUUID().replace(/-/g, '');
fs.mkdirSync(path.join(global.get('tasksDir'), id), { recursive: true });
const now = new Date().toISOString();
const task = { task_id: id, input: msg.payload.input ?? null, additional_input: msg.payload.additional_input ?? null, created_at: now, modified_at: now, artifacts: [] };
global.get('tasks').set(id, task);
msg.payload = task; return msg;`;
  const step = `
const task = global.get('tasks').get(msg.req.params.id);
if (!task) { msg.statusCode = 404; msg.payload = { error: 'no task' }; return msg; }
const now = new Date().toISOString();
msg.payload = { task_id: task.task_id, step_id: global.get('crypto').randomUUID().replace(/-/g, ''), name: 'run echo', input: null, additional_input: null, status: 'completed', output: task.input, additional_output: { outputs: { output: task.input } }, artifacts: [], is_last: true, created_at: now, modified_at: now };
return msg;`;
  return [
    { id: "flow", type: "tab", label: "serve" },
    { id: "in_task", type: "http in", url: "/ap/v1/agent/tasks", method: "post", wires: [["create"]] },
    { id: "create", type: "function", func: create, outputs: 1, wires: [["out_task"]] },
    { id: "out_task", type: "http response", statusCode: "", headers: {}, wires: [] },
    { id: "in_step", type: "http in", url: "/ap/v1/agent/tasks/:id/steps", method: "post", wires: [["step"]] },
    { id: "step", type: "function", func: step, outputs: 1, wires: [["out_step"]] },
    { id: "out_step", type: "http response", statusCode: "", headers: {}, wires: [] },
  ];
}

async function main() {
  const [what, a, b] = process.argv.slice(2);
  const userDir = fs.mkdtempSync(path.join(os.tmpdir(), "nodered-bench-"));
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const serving = what === "serve";
  const settings = {
    userDir,
    flowFile: "flows.json",
    httpAdminRoot: false,
    httpNodeRoot: serving ? "/" : false,
    logging: { console: { level: "off", metrics: false, audit: false } },
    functionGlobalContext: {
      done: () => finish(),
      fs,
      path,
      crypto: require("crypto"),
      tasks: new Map(),
      tasksDir: path.join(userDir, "tasks"),
    },
  };
  let flow;
  if (what === "start") flow = chainFlow(1);
  else if (what === "chain") flow = chainFlow(Number(a));
  else if (what === "fanout") flow = fanoutFlow(Number(a), Number(b));
  else if (serving) flow = serveFlow(settings.functionGlobalContext.tasksDir);
  else throw new Error(`unknown figure ${what}`);
  fs.writeFileSync(path.join(userDir, "flows.json"), JSON.stringify(nodes(flow.slice(1)).concat([flow[0]])));

  let server;
  if (serving) {
    const express = require("express");
    const app = express();
    server = http.createServer(app);
    RED.init(server, settings);
    app.use("/", RED.httpNode);
  } else {
    server = http.createServer();
    RED.init(server, settings);
  }
  const flowsStarted = new Promise((resolve) => RED.events.once("flows:started", resolve));
  await RED.start();
  await flowsStarted;
  if (serving) {
    server.listen(Number(a), "127.0.0.1", () => process.stderr.write(`listening on ${a}\n`));
    return;
  }
  const started = process.hrtime.bigint();
  RED.nodes.getNode("n0").receive({ payload: 1 });
  await finished;
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  process.stdout.write(JSON.stringify({ run_ms: ms }) + "\n");
  await RED.stop();
  fs.rmSync(userDir, { recursive: true, force: true });
  process.exit(0);
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});
