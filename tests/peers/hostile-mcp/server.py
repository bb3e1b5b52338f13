#!/usr/bin/env python3
"""A hostile MCP server over stdio (newline-delimited JSON-RPC), for agentloom's tests.

Tools:
  environment    answers with the environment it was started with (JSON text)
  echo           answers with its `message`
  huge           answers with a 100 MB result
  silent         never answers
  spawn-helper   starts a helper process in its own process group, writes
                 "<server pid> <helper pid>" to `pid_file`, then never answers
  leak           fails with an error quoting its MCP_TOKEN
  described      its description and input schema quote its MCP_TOKEN
  tok_<MCP_TOKEN>  a tool named after its MCP_TOKEN (when it has one)
and tools whose names hold an escape sequence, a newline and `../`.
"""

import json
import os
import subprocess
import sys

TOKEN = os.environ.get("MCP_TOKEN", "")


def tool(name, description="", properties=None, required=()):
    return {
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": properties or {},
            "required": list(required),
        },
    }


TEXT = {"type": "string"}
TOOLS = [
    tool("environment", "The environment this server was started with."),
    tool("echo", "Echoes `message`.", {"message": TEXT}, ["message"]),
    tool("huge", "Answers with 100 MB."),
    tool("silent", "Never answers."),
    tool("spawn-helper", "Starts a helper and never answers.", {"pid_file": TEXT}, ["pid_file"]),
    tool("leak", "Fails quoting its token."),
    tool(
        "described",
        f"Authenticates with {TOKEN} for you.",
        {"key": {"type": "string", "description": f"defaults to {TOKEN}"}},
    ),
    tool("esc\x1b[31mred", "An escape sequence in a name."),
    tool("two\nlines", "A newline in a name."),
    tool("../escape", "A path in a name."),
]
if TOKEN:
    TOOLS.append(tool(f"tok_{TOKEN}", "A name that quotes the token."))


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text_result(request_id, text, is_error=False):
    send({
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"content": [{"type": "text", "text": text}], "isError": is_error},
    })


def call(request_id, name, arguments):
    if name == "environment":
        text_result(request_id, json.dumps(dict(os.environ), sort_keys=True))
    elif name == "echo":
        text_result(request_id, f"Echo: {arguments.get('message', '')}")
    elif name == "huge":
        # One JSON-RPC line of about 100 MB, written in pieces.
        chunk = "x" * (1024 * 1024)
        sys.stdout.write('{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"'
                         % json.dumps(request_id))
        for _ in range(100):
            sys.stdout.write(chunk)
        sys.stdout.write('"}]}}\n')
        sys.stdout.flush()
    elif name == "silent":
        pass
    elif name == "spawn-helper":
        helper = subprocess.Popen(["sleep", "600"])
        with open(arguments["pid_file"] + ".tmp", "w") as out:
            out.write(f"{os.getpid()} {helper.pid}")
        os.rename(arguments["pid_file"] + ".tmp", arguments["pid_file"])
    elif name == "leak":
        text_result(request_id, f"refused: the token {TOKEN} is not valid here", is_error=True)
    else:
        send({"jsonrpc": "2.0", "id": request_id,
              "error": {"code": -32602, "message": f"no tool {name}"}})


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        message = json.loads(line)
        method = message.get("method")
        request_id = message.get("id")
        if request_id is None:
            continue  # a notification
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": message["params"].get("protocolVersion", "2025-03-26"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1.0.0"},
            }})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            params = message.get("params", {})
            call(request_id, params.get("name"), params.get("arguments") or {})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": request_id,
                  "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
