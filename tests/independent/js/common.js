'use strict'
// What every client driver shares: how pytest talks to it, and the scenarios' record shapes.
//
// A driver runs as `node <client>.js <scenario> '<json arguments>'`. It writes JSON lines to stdout: progress
// events ({"event": ...}) that pytest may act on (kill the broker, kill this process), then exactly one
// {"result": ...}. Anything else (client logs) goes to stderr. The verdict is pytest's: drivers report what the
// client did and saw, they do not judge it.

function emit (obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

function log (...parts) {
  process.stderr.write(parts.map(p => (typeof p === 'string' ? p : JSON.stringify(p))).join(' ') + '\n')
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// An error as pytest compares it: the client's class name, its Kafka error name or code where the client
// exposes one, and the message.
function describeError (err) {
  if (err === null || err === undefined) return null
  const out = { class: err.constructor ? err.constructor.name : typeof err, message: String(err.message || err) }
  for (const key of ['type', 'code', 'apiCode', 'apiId', 'serverErrorMessage', 'retriable', 'name']) {
    if (err[key] !== undefined && typeof err[key] !== 'object' && typeof err[key] !== 'function') out[key] = err[key]
  }
  const nested = err.errors || (err.cause ? [err.cause] : null)
  if (Array.isArray(nested) && nested.length) out.errors = nested.slice(0, 5).map(describeError)
  return out
}

// Headers of a consumed record as a sorted list of [name, value] string pairs (clients differ: object, Map,
// array of single-entry objects; values Buffer, string or array of them).
function headerPairs (headers) {
  const out = []
  const add = (k, v) => {
    if (Array.isArray(v)) v.forEach(x => add(k, x))
    else out.push([String(k), v === null || v === undefined ? null : Buffer.from(v).toString('utf8')])
  }
  if (!headers) return out
  if (headers instanceof Map) for (const [k, v] of headers) add(k, v)
  else if (Array.isArray(headers)) headers.forEach(h => Object.entries(h).forEach(([k, v]) => add(k, v)))
  else Object.entries(headers).forEach(([k, v]) => add(k, v))
  return out.sort()
}

const text = b => (b === null || b === undefined ? null : Buffer.from(b).toString('utf8'))

// One consumed record as pytest reads it: [partition, offset, key, value, headers].
function recordOut (partition, offset, key, value, headers) {
  return [Number(partition), Number(offset), text(key), text(value), headerPairs(headers)]
}

// Runs the scenario named on the command line; an exception fails the process with the error on stderr and as
// the result, so pytest shows what the client said.
function main (scenarios) {
  const [name, raw] = process.argv.slice(2)
  const run = scenarios[name]
  if (!run) {
    log(`unknown scenario ${name}; known: ${Object.keys(scenarios).join(', ')}`)
    process.exit(2)
  }
  const args = JSON.parse(raw || '{}')
  let stopping = false
  process.on('SIGTERM', () => { stopping = true })
  const ctx = { stopping: () => stopping }
  run(args, ctx).then(result => {
    emit({ result })
    process.exit(0)
  }, err => {
    log('scenario failed:', err && err.stack ? err.stack : String(err))
    log('the error in detail:', describeError(err))
    emit({ failed: describeError(err) })
    process.exit(1)
  })
}

module.exports = { emit, log, sleep, describeError, headerPairs, recordOut, text, main }
