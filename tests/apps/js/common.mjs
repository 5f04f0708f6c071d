// Shared plumbing of the nats.js test apps: flags, JSON-lines output, stderr log,
// SIGTERM/SIGINT. Nothing here touches NATS.
import { openSync, writeSync, closeSync } from "node:fs";

// --flag value / --switch; `switches` lists the flags that take no value.
export function parseArgs(required, defaults = {}, switches = []) {
  const args = { ...defaults };
  for (let i = 2; i < process.argv.length; i++) {
    const a = process.argv[i];
    if (!a.startsWith("--")) {
      console.error(`unexpected argument ${a}`);
      process.exit(2);
    }
    const k = a.slice(2);
    if (switches.includes(k)) args[k] = true;
    else args[k] = process.argv[++i];
  }
  for (const k of required) {
    if (args[k] === undefined) {
      console.error(`--${k} is required`);
      process.exit(2);
    }
  }
  return args;
}

export function output(path) {
  const fd = openSync(path, "a");
  return {
    line: (o) => writeSync(fd, JSON.stringify(o) + "\n"),
    close: () => closeSync(fd),
  };
}

export function logger(name) {
  const last = new Map();
  const log = (...parts) => {
    const t = new Date().toISOString().slice(11, 19);
    console.error(t, `${name}:`, ...parts);
  };
  // logs a repeated error once, then at most every 5 s
  log.limited = (key, ...parts) => {
    const now = Date.now();
    if (now - (last.get(key) ?? -1e12) >= 5000) {
      last.set(key, now);
      log(...parts);
    }
  };
  return log;
}

// A promise resolved at SIGTERM/SIGINT, and a flag.
export function stopSignal() {
  const s = { stopped: false };
  s.promise = new Promise((resolve) => {
    const on = () => {
      s.stopped = true;
      resolve();
    };
    process.on("SIGTERM", on);
    process.on("SIGINT", on);
  });
  return s;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function ready() {
  process.stdout.write("ready\n");
}
