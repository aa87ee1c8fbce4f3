#!/usr/bin/env node
// A proxyless grpc-js client of ringxds. It dials xds:///TARGET through
// @grpc/grpc-js-xds, so grpc-js builds its own ring_hash from what ringxds
// publishes, and sends keyed RPCs to grpc.testing.TestService/UnaryCall,
// whose answer names the backend that served it (examples/grpc/server).
//
// Two modes:
//   node client.js --debug http://127.0.0.1:18080 -n 1000
//       sends keys product-0 .. product-999 and checks each against
//       /debug/pick?client=grpc-js; exits 1 unless every key agrees.
//   node client.js --lines
//       reads one key per line on stdin and writes "key<TAB>backend" (or
//       "key<TAB>!error") per line on stdout, for tests that drive it.
//
// The xDS bootstrap comes from GRPC_XDS_BOOTSTRAP (a file) or
// GRPC_XDS_BOOTSTRAP_CONFIG (the JSON); without either, one is made for
// --xds-server.
"use strict";

const readline = require("node:readline");

function parseArgs(argv) {
  const opts = {
    xdsServer: "127.0.0.1:18000",
    debug: "http://127.0.0.1:18080",
    target: "products",
    header: "x-product-id",
    keyPrefix: "product-",
    n: 1000,
    lines: false,
    timeoutMs: 10000,
  };
  const flags = {
    "--xds-server": (v) => { opts.xdsServer = v; },
    "--debug": (v) => { opts.debug = v; },
    "--target": (v) => { opts.target = v; },
    "--header": (v) => { opts.header = v.toLowerCase(); },
    "--key-prefix": (v) => { opts.keyPrefix = v; },
    "-n": (v) => { opts.n = Number.parseInt(v, 10); },
    "--timeout-ms": (v) => { opts.timeoutMs = Number.parseInt(v, 10); },
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--lines") { opts.lines = true; continue; }
    if (a === "-h" || a === "--help") {
      console.log("usage: client.js [--xds-server host:port] [--debug URL] [--target NAME] [--header NAME] [--key-prefix P] [-n N] [--lines]");
      process.exit(0);
    }
    const set = flags[a];
    if (!set || i + 1 >= argv.length) {
      console.error(`client.js: unknown or incomplete flag ${a} (try --help)`);
      process.exit(2);
    }
    set(argv[++i]);
  }
  if (!Number.isInteger(opts.n) || opts.n < 1) {
    console.error("client.js: -n must be a positive integer");
    process.exit(2);
  }
  return opts;
}

// bootstrap is the smallest bootstrap grpc-js-xds accepts: it requires a
// node locality, even an empty one.
function bootstrap(xdsServer) {
  return JSON.stringify({
    xds_servers: [{ server_uri: xdsServer, channel_creds: [{ type: "insecure" }], server_features: ["xds_v3"] }],
    node: { id: `grpc-node-example-${process.pid}`, locality: {} },
  });
}

// hostnameOf reads field 6 (hostname) of a grpc.testing.SimpleResponse
// without a .proto file: the example needs no code generation.
function hostnameOf(buf) {
  let i = 0;
  const varint = () => {
    let v = 0, shift = 0, b;
    do {
      if (i >= buf.length) throw new Error("truncated SimpleResponse");
      b = buf[i++];
      v += (b & 0x7f) * 2 ** shift;
      shift += 7;
    } while (b & 0x80);
    return v;
  };
  while (i < buf.length) {
    const tag = varint();
    const field = Math.floor(tag / 8), wire = tag % 8;
    if (wire === 0) { varint(); continue; }
    if (wire === 1) { i += 8; continue; }
    if (wire === 5) { i += 4; continue; }
    if (wire !== 2) throw new Error(`unexpected wire type ${wire} in SimpleResponse`);
    const len = varint();
    if (field === 6) return buf.subarray(i, i + len).toString("utf8");
    i += len;
  }
  return "";
}

function newClient(grpc, target) {
  const raw = (b) => b;
  const Client = grpc.makeGenericClientConstructor({
    UnaryCall: {
      path: "/grpc.testing.TestService/UnaryCall",
      requestStream: false, responseStream: false,
      requestSerialize: raw, requestDeserialize: raw,
      responseSerialize: raw, responseDeserialize: raw,
    },
  }, "TestService");
  return new Client(`xds:///${target}`, grpc.credentials.createInsecure());
}

// call sends one RPC hashed on header=key and resolves to the backend that
// answered.
function call(grpc, client, header, key, timeoutMs) {
  const md = new grpc.Metadata();
  md.set(header, key);
  return new Promise((resolve, reject) => {
    client.UnaryCall(Buffer.alloc(0), md, { deadline: Date.now() + timeoutMs }, (err, resp) => {
      if (err) reject(new Error(`${err.code} ${err.details}`));
      else resolve(hostnameOf(resp));
    });
  });
}

async function debugPick(base, cluster, key) {
  const q = new URLSearchParams({ cluster, key, client: "grpc-js" });
  const resp = await fetch(`${base}/debug/pick?${q}`);
  const body = await resp.json();
  if (!resp.ok) throw new Error(`/debug/pick: ${body.error || resp.status}`);
  return body.endpoint;
}

async function linesMode(grpc, client, opts) {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const key of rl) {
    if (key === "") continue;
    let out;
    try {
      out = await call(grpc, client, opts.header, key, opts.timeoutMs);
    } catch (err) {
      out = "!" + err.message.replace(/[\t\n]/g, " ");
    }
    process.stdout.write(`${key}\t${out}\n`);
  }
}

async function checkMode(grpc, client, opts) {
  let agree = 0;
  const perBackend = new Map();
  for (let i = 0; i < opts.n; i++) {
    const key = opts.keyPrefix + i;
    const got = await call(grpc, client, opts.header, key, opts.timeoutMs);
    const want = await debugPick(opts.debug, opts.target, key);
    perBackend.set(got, (perBackend.get(got) || 0) + 1);
    if (got === want) agree++;
    else if (opts.n - agree <= 5) console.error(`key ${key}: grpc-js sent it to ${got}, /debug/pick?client=grpc-js says ${want}`);
  }
  const spread = [...perBackend.entries()].sort().map(([b, n]) => `${b}=${n}`).join(" ");
  console.log(`grpc-js agreement with /debug/pick: ${agree}/${opts.n} (${(100 * agree / opts.n).toFixed(1)}%); per backend: ${spread}`);
  return agree === opts.n;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (!process.env.GRPC_XDS_BOOTSTRAP && !process.env.GRPC_XDS_BOOTSTRAP_CONFIG) {
    process.env.GRPC_XDS_BOOTSTRAP_CONFIG = bootstrap(opts.xdsServer);
  }
  const grpc = require("@grpc/grpc-js");
  const xds = require("@grpc/grpc-js-xds");
  xds.register();
  const version = require("@grpc/grpc-js-xds/package.json").version;
  console.error(`grpc-js-xds ${version}, grpc-js ${require("@grpc/grpc-js/package.json").version}: dialing xds:///${opts.target}`);
  const client = newClient(grpc, opts.target);
  try {
    if (opts.lines) {
      await linesMode(grpc, client, opts);
      return 0;
    }
    return (await checkMode(grpc, client, opts)) ? 0 : 1;
  } finally {
    client.close();
  }
}

main().then((code) => process.exit(code), (err) => {
  console.error(`client.js: ${err.message}`);
  process.exit(1);
});
