// A real local language model behind an OpenAI-compatible API: llama.cpp (node-llama-cpp)
// runs a GGUF file on the CPU and answers POST /v1/chat/completions, whole or streamed (SSE).
//
// When the request offers `tools`, the model's output is constrained by a JSON-schema grammar
// to {"name": <one of the offered tools>, "arguments": <that tool's parameters>}; the model
// still picks the tool and writes the arguments itself, the grammar only forces the shape, so
// even a tiny model yields well-formed tool calls.
//
//   node server.mjs --model /path/to/model.gguf [--host 127.0.0.1] [--port 8088]
//                   [--context 4096] [--max-tokens 256] [--threads 1]
//
// Prints `listening on http://HOST:PORT/v1` once the model is loaded.

import http from "node:http";
import { randomUUID } from "node:crypto";
import { getLlama, LlamaChat } from "node-llama-cpp";

function option(name, fallback) {
    const at = process.argv.indexOf(`--${name}`);
    return at >= 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback;
}

const modelPath = option("model", process.env.LOCAL_LLM_MODEL);
if (!modelPath) {
    console.error("usage: node server.mjs --model MODEL.gguf [--host H] [--port P]");
    process.exit(2);
}
const host = option("host", "127.0.0.1");
const port = Number(option("port", "8088"));
const contextSize = Number(option("context", "4096"));
const defaultMaxTokens = Number(option("max-tokens", "256"));
// llama.cpp busy-waits across its threads; on a shared CPU one thread is much faster.
const threads = Number(option("threads", "1"));

const llama = await getLlama({ gpu: false });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ contextSize, threads });
const sequence = context.getSequence();
const chat = new LlamaChat({ contextSequence: sequence });
const modelName = modelPath.split("/").pop().replace(/\.gguf$/, "");

// The schema of one tool call: the chosen tool's name, then its arguments.
function toolCallSchema(tools) {
    return {
        oneOf: tools.map((tool) => ({
            type: "object",
            properties: {
                name: { const: tool.function.name },
                arguments: grammarSchema(tool.function.parameters ?? { type: "object" }),
            },
        })),
    };
}

// The subset of JSON Schema the grammar understands. Only required properties are kept
// (the grammar makes every listed property mandatory); strings are bounded so a small
// model cannot ramble past the token limit.
function grammarSchema(schema) {
    if (schema == null || typeof schema !== "object") return { type: "string", maxLength: 400 };
    if (schema.enum) return { enum: schema.enum };
    if (schema.const !== undefined) return { const: schema.const };
    const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
    switch (type) {
        case "object": {
            const required = new Set(schema.required ?? []);
            const properties = {};
            for (const [key, value] of Object.entries(schema.properties ?? {})) {
                if (required.has(key)) properties[key] = grammarSchema(value);
            }
            return { type: "object", properties };
        }
        case "array":
            return { type: "array", items: grammarSchema(schema.items), maxItems: 8 };
        case "integer":
        case "number":
        case "boolean":
        case "null":
            return { type };
        default:
            return { type: "string", maxLength: 400 };
    }
}

// A compact tool list reads better for small models than whole JSON schemas.
function toolPrompt(tools) {
    const lines = tools.map((t) => {
        const args = Object.keys(t.function.parameters?.properties ?? {}).join(", ");
        return `- ${t.function.name}(${args}): ${t.function.description ?? ""}`;
    });
    return `\n\nTools:\n${lines.join("\n")}\n\nReply with one JSON object {"name": TOOL, "arguments": {...}} that calls the tool the goal needs next.`;
}

function text(content) {
    if (typeof content === "string") return content;
    if (Array.isArray(content)) return content.map((p) => p.text ?? "").join("");
    return "";
}

// OpenAI messages as node-llama-cpp chat history. Tool calls are shown to the model in the
// same JSON it writes; tool results come back as user turns.
function history(messages, tools) {
    const items = [];
    const user = (t) => {
        const last = items[items.length - 1];
        if (last?.type === "user") last.text += `\n\n${t}`;
        else items.push({ type: "user", text: t });
    };
    for (const m of messages) {
        if (m.role === "system" || m.role === "developer") {
            items.push({ type: "system", text: text(m.content) });
        } else if (m.role === "user") {
            user(text(m.content));
        } else if (m.role === "tool") {
            user(`Tool result: ${text(m.content)}`);
        } else if (m.role === "assistant") {
            const calls = (m.tool_calls ?? []).map((c) =>
                JSON.stringify({ name: c.function.name, arguments: JSON.parse(c.function.arguments || "{}") }),
            );
            items.push({ type: "model", response: [[text(m.content), ...calls].filter(Boolean).join("\n")] });
        }
    }
    if (tools.length > 0) {
        const system = items.find((i) => i.type === "system");
        if (system) system.text += toolPrompt(tools);
        else items.unshift({ type: "system", text: toolPrompt(tools).trim() });
    }
    items.push({ type: "model", response: [] });
    return items;
}

// One generation at a time: there is one context sequence.
let queue = Promise.resolve();
function serialized(work) {
    const run = queue.then(work, work);
    queue = run.catch(() => {});
    return run;
}

async function complete(body, onText) {
    const tools = (body.tools ?? []).filter((t) => t.type === "function" && t.function?.name);
    const useTools = tools.length > 0 && body.tool_choice !== "none";
    const chatHistory = history(body.messages ?? [], useTools ? tools : []);
    const grammar = useTools ? await llama.createGrammarForJsonSchema(toolCallSchema(tools)) : undefined;
    const promptTokens = chat.chatWrapper
        .generateContextState({ chatHistory })
        .contextText.tokenize(model.tokenizer).length;
    const before = sequence.tokenMeter.getState();
    const result = await chat.generateResponse(chatHistory, {
        grammar,
        maxTokens: body.max_tokens ?? body.max_completion_tokens ?? defaultMaxTokens,
        temperature: body.temperature ?? 0.2,
        onTextChunk: useTools ? undefined : onText,
    });
    const used = sequence.tokenMeter.diff(before);
    const usage = {
        prompt_tokens: promptTokens,
        completion_tokens: used.usedOutputTokens,
        total_tokens: promptTokens + used.usedOutputTokens,
    };
    if (useTools) {
        try {
            const call = grammar.parse(result.response);
            return {
                content: null,
                tool_calls: [
                    {
                        id: `call_${randomUUID().slice(0, 8)}`,
                        type: "function",
                        function: { name: call.name, arguments: JSON.stringify(call.arguments ?? {}) },
                    },
                ],
                finish_reason: "tool_calls",
                usage,
            };
        } catch {
            // Cut off by the token limit: return what the model wrote, no call.
            return { content: result.response, tool_calls: [], finish_reason: "length", usage };
        }
    }
    const reason = result.metadata?.stopReason === "maxTokens" ? "length" : "stop";
    return { content: result.response, tool_calls: [], finish_reason: reason, usage };
}

function send(res, status, object) {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(object));
}

const server = http.createServer(async (req, res) => {
    const path = req.url.replace(/\?.*$/, "");
    if (req.method === "GET" && path === "/v1/models") {
        return send(res, 200, { object: "list", data: [{ id: modelName, object: "model", owned_by: "local" }] });
    }
    if (req.method !== "POST" || path !== "/v1/chat/completions") {
        return send(res, 404, { error: { message: `no route ${req.method} ${path}`, type: "not_found" } });
    }
    let raw = "";
    for await (const chunk of req) raw += chunk;
    let body;
    try {
        body = JSON.parse(raw);
    } catch (e) {
        return send(res, 400, { error: { message: `the body is not JSON: ${e.message}`, type: "invalid_request_error" } });
    }
    const id = `chatcmpl-${randomUUID()}`;
    const created = Math.floor(Date.now() / 1000);
    const started = Date.now();
    const head = { id, object: "chat.completion.chunk", created, model: body.model ?? modelName };
    const sse = (data) => res.write(`data: ${JSON.stringify(data)}\n\n`);
    if (body.stream) {
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
        sse({ ...head, choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] });
    }
    try {
        const reply = await serialized(() =>
            complete(body, body.stream ? (piece) => sse({ ...head, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] }) : undefined),
        );
        const calls = reply.tool_calls.length > 0 ? reply.tool_calls : undefined;
        console.error(
            `${new Date().toISOString()} ${body.stream ? "stream" : "whole"} ${Date.now() - started} ms, ` +
                `${reply.usage.prompt_tokens} in / ${reply.usage.completion_tokens} out: ` +
                (calls ? `${calls[0].function.name} ${calls[0].function.arguments}` : JSON.stringify(reply.content)),
        );
        if (body.stream) {
            if (calls) {
                sse({ ...head, choices: [{ index: 0, delta: { tool_calls: calls.map((c, index) => ({ index, ...c })) }, finish_reason: null }] });
            }
            sse({ ...head, choices: [{ index: 0, delta: {}, finish_reason: reply.finish_reason }] });
            if (body.stream_options?.include_usage) sse({ ...head, choices: [], usage: reply.usage });
            res.end("data: [DONE]\n\n");
        } else {
            send(res, 200, {
                id,
                object: "chat.completion",
                created,
                model: body.model ?? modelName,
                choices: [
                    {
                        index: 0,
                        message: { role: "assistant", content: reply.content, ...(calls ? { tool_calls: calls } : {}) },
                        finish_reason: reply.finish_reason,
                    },
                ],
                usage: reply.usage,
            });
        }
    } catch (e) {
        console.error(`generation failed: ${e.stack ?? e}`);
        if (body.stream) {
            sse({ error: { message: `generation failed: ${e.message}`, type: "server_error" } });
            res.end();
        } else {
            send(res, 500, { error: { message: `generation failed: ${e.message}`, type: "server_error" } });
        }
    }
});

server.listen(port, host, () => {
    const address = server.address();
    console.log(`listening on http://${address.address}:${address.port}/v1 (model ${modelName})`);
});

for (const signal of ["SIGINT", "SIGTERM"]) {
    process.on(signal, async () => {
        server.close();
        await context.dispose();
        await model.dispose();
        process.exit(0);
    });
}
