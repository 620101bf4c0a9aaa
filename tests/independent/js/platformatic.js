'use strict'
// @platformatic/kafka 2.12 driver: pure JavaScript, its own protocol implementation (no librdkafka). Codecs:
// gzip from Node's zlib, snappy and lz4 from its WebAssembly helpers, zstd from Node's zlib (Node >= 22.15 only).
const {
  Admin, Consumer, Producer, ProduceAcks, FetchIsolationLevels, MessagesStreamModes
} = require('@platformatic/kafka')
const { emit, log, sleep, describeError, recordOut, main } = require('./common')

// The client's `timeout` is also its transaction.timeout.ms (InitProducerId): 10 s here.

const base = args => ({ clientId: 'oncelog-independent-platformatic', bootstrapBrokers: [args.bootstrap],
  retries: 30, retryDelay: 200, timeout: 10000, connectTimeout: 3000, autocreateTopics: false })
const buf = s => (s === null || s === undefined ? undefined : Buffer.from(s))

const toMessage = (topic, r) => ({
  topic,
  key: buf(r.key),
  value: r.value === null ? null : Buffer.from(r.value),
  headers: new Map((r.headers || []).map(([k, v]) => [Buffer.from(k), Buffer.from(v)])),
  ...(r.partition !== undefined ? { partition: r.partition } : {})
})

const out = m => [m.topic, ...recordOut(m.partition, m.offset, m.key, m.value, m.headers)]

// Every record of `topics` from the beginning through a group consumer of its own, until `count` records
// arrived and nothing more came for `quietMs`.
async function readAll (args, topics, count, { isolationLevel = FetchIsolationLevels.READ_COMMITTED,
  quietMs = 500, timeoutMs = 30000 } = {}) {
  const consumer = new Consumer({ ...base(args), groupId: `reader-${process.pid}-${Date.now()}`, isolationLevel,
    maxWaitTime: 100, sessionTimeout: 10000, heartbeatInterval: 500 })
  const records = []
  let last = Date.now()
  const stream = await consumer.consume({ topics, mode: MessagesStreamModes.EARLIEST, autocommit: false })
  stream.on('data', m => { records.push(out(m)); last = Date.now() })
  stream.on('error', err => log('reader stream error', describeError(err)))
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline && !(records.length >= count && Date.now() - last >= quietMs)) await sleep(50)
  await stream.close()
  await consumer.close(true)
  return records
}

async function codecs (args) {
  const sent = {}
  for (const { codec, topic } of args.cases) {
    const producer = new Producer({ ...base(args), compression: codec === 'none' ? undefined : codec })
    const res = await producer.send({ acks: ProduceAcks.ALL, messages: args.records.map(r => toMessage(topic, r)) })
    sent[codec] = res.offsets.map(o => [o.partition, Number(o.offset)])
    await producer.close()
  }
  const consumed = await readAll(args, args.cases.map(c => c.topic), args.records.length * args.cases.length)
  const result = {}
  for (const { codec, topic } of args.cases) {
    result[codec] = { sent: sent[codec], consumed: consumed.filter(r => r[0] === topic).map(r => r.slice(1)) }
  }
  return result
}

// Idempotent producer through a broker SIGKILL: chunks sent one after another, each retried by the client
// until the broker is back; a chunk whose retries ran out is sent again by the application.
async function idempotent (args) {
  const producer = new Producer({ ...base(args), idempotent: true, retries: 100, retryDelay: 100 })
  let acked = 0
  const errors = []
  while (acked < args.count) {
    const n = Math.min(args.chunk, args.count - acked)
    const messages = Array.from({ length: n }, (_, i) => ({ topic: args.topic, partition: 0,
      value: Buffer.from(String(acked + i)) }))
    try {
      await producer.send({ messages })
    } catch (err) {
      errors.push(describeError(err))
      if (errors.length > 20) throw err
      await sleep(200)
      continue
    }
    acked += n
    emit({ event: 'acked', acked })
  }
  await producer.close()
  return { acked, errors }
}

async function transactions (args) {
  const producer = new Producer({ ...base(args), idempotent: true, transactionalId: args.tid })
  for (const batch of args.batches) {
    const txn = await producer.beginTransaction()
    await txn.send({ messages: batch.records.map(r => toMessage(args.topic, r)) })
    if (batch.commit) await txn.commit()
    else await txn.abort()
    emit({ event: batch.commit ? 'committed' : 'aborted' })
  }
  await producer.close()
  const consumed = await readAll(args, [args.topic], args.expectCommitted)
  return { consumed: consumed.map(r => r.slice(1)) }
}

// One member of an exactly-once copier group, as the client's transactions guide shows it: a read_committed
// stream without autocommit, and per transaction addConsumer + send + addOffset + commit. Each transaction
// copies up to `maxPerTxn` records and pauses `pauseMs` before committing, saying so first. A transaction that
// fails (e.g. ILLEGAL_GENERATION from TxnOffsetCommit when a rebalance overtook the records it copies) is
// aborted and its records are read again: the stream is replaced by one starting at the committed offsets.
async function copy (args, ctx) {
  const producer = new Producer({ ...base(args), idempotent: true, transactionalId: args.tid })
  const consumer = new Consumer({ ...base(args), groupId: args.group, sessionTimeout: args.sessionTimeout,
    rebalanceTimeout: args.sessionTimeout, heartbeatInterval: 500, maxWaitTime: 200,
    isolationLevel: FetchIsolationLevels.READ_COMMITTED })
  consumer.on('consumer:group:join', () => emit({ event: 'joined', assignment: consumer.assignments }))
  let total = 0
  while (!ctx.stopping()) {
    const stream = await consumer.consume({ topics: [args.input], mode: MessagesStreamModes.COMMITTED,
      fallbackMode: 'earliest', autocommit: false })
    const pending = []
    stream.on('data', m => pending.push(m))
    stream.on('error', err => log('copy stream error', describeError(err)))
    while (!ctx.stopping()) {
      if (pending.length === 0) { await sleep(20); continue }
      const chunk = pending.splice(0, args.maxPerTxn)
      const txn = await producer.beginTransaction()
      try {
        await txn.addConsumer(consumer)
        await txn.send({ messages: chunk.map(m => ({ topic: args.output, key: m.key, value: m.value })) })
        emit({ event: 'in_txn', records: chunk.length })
        await sleep(args.pauseMs)
        const last = new Map() // the last offset of each partition in the chunk
        for (const m of chunk) last.set(m.partition, m)
        for (const m of last.values()) await txn.addOffset(m)
        await txn.commit()
      } catch (err) {
        log('copy: transaction failed; aborting it and reading again from the committed offsets', describeError(err))
        await txn.abort()
        emit({ event: 'aborted', error: describeError(err) })
        break
      }
      total += chunk.length
      emit({ event: 'committed', records: chunk.length, total })
    }
    await stream.close()
  }
  await consumer.close(true)
  await producer.close()
  return { total }
}

// Consumer group: A alone, then B joins (rebalance), then A leaves (B takes all), then B leaves, then C resumes
// from the group's committed offsets. Between the phases the driver produces `perPhase` records per partition.
async function group (args) {
  const producer = new Producer(base(args))
  const produce = async phase => {
    const messages = []
    for (let p = 0; p < args.partitions; p++) {
      for (let i = 0; i < args.perPhase; i++) {
        messages.push({ topic: args.topic, partition: p, key: buf(`${phase}-${p}`), value: buf(`${phase}-${p}-${i}`) })
      }
    }
    await producer.send({ acks: ProduceAcks.ALL, messages })
  }
  const start = async name => {
    const m = { name, assignment: [], records: [], joins: 0 }
    m.consumer = new Consumer({ ...base(args), groupId: args.group, sessionTimeout: 10000, rebalanceTimeout: 10000,
      heartbeatInterval: 300, maxWaitTime: 100 })
    m.consumer.on('consumer:group:join', () => {
      m.joins++
      const mine = (m.consumer.assignments || []).find(a => a.topic === args.topic)
      m.assignment = mine ? mine.partitions.slice().sort() : []
    })
    m.stream = await m.consumer.consume({ topics: [args.topic], mode: MessagesStreamModes.COMMITTED,
      fallbackMode: 'earliest', autocommit: false })
    m.stream.on('data', msg => {
      m.records.push(recordOut(msg.partition, msg.offset, msg.key, msg.value, msg.headers))
      msg.commit()
    })
    m.stream.on('error', err => log(`member ${name} stream error`, describeError(err)))
    return m
  }
  const stop = async m => {
    await m.stream.close()
    await m.consumer.close()
  }
  const waitFor = async (what, cond, timeoutMs = 30000) => {
    const deadline = Date.now() + timeoutMs
    while (!cond()) {
      if (Date.now() > deadline) throw new Error(`group: timed out waiting for ${what}`)
      await sleep(50)
    }
  }
  const all = Array.from({ length: args.partitions }, (_, p) => p)
  const covers = ms => JSON.stringify(ms.flatMap(m => m.assignment).sort()) === JSON.stringify(all)
  const phases = {}
  const snapshot = (phase, ms) => {
    phases[phase] = Object.fromEntries(ms.map(m => [m.name, { assignment: m.assignment, records: m.records.splice(0) }]))
  }
  const seen = ms => ms.reduce((n, m) => n + m.records.length, 0)

  await produce('p1')
  const a = await start('A')
  await waitFor('A to read phase 1', () => seen([a]) >= args.partitions * args.perPhase)
  snapshot('p1', [a])
  const b = await start('B')
  await waitFor('A and B to share the partitions', () => b.joins > 0 && a.joins > 1 && covers([a, b]))
  // a fetch A sent before the rebalance (a long poll of up to maxWaitTime) is still answered afterwards, and
  // this client hands over its records even for partitions A no longer owns: let it end before producing
  await sleep(500)
  await produce('p2')
  await waitFor('A and B to read phase 2', () => seen([a, b]) >= args.partitions * args.perPhase)
  snapshot('p2', [a, b])
  await stop(a)
  await waitFor('B to take every partition', () => b.joins > 1 && covers([b]))
  await produce('p3')
  await waitFor('B to read phase 3', () => seen([b]) >= args.partitions * args.perPhase)
  snapshot('p3', [b])
  await stop(b)
  await produce('p4')
  const c = await start('C')
  await waitFor('C to read phase 4', () => seen([c]) >= args.partitions * args.perPhase)
  await sleep(500) // anything C reads beyond phase 4 (a re-delivery) would arrive by now
  snapshot('p4', [c])
  await stop(c)
  await producer.close()
  return { phases }
}

async function errors (args) {
  const result = {}
  const opts = { ...base(args), retries: 2, retryDelay: 100 }
  const producer = new Producer(opts)
  try {
    await producer.send({ acks: ProduceAcks.ALL, messages: [{ topic: args.missingTopic, value: buf('x') }] })
    result.unknownTopic = null
  } catch (err) { result.unknownTopic = describeError(err) }
  try {
    await producer.send({ acks: ProduceAcks.ALL, messages: [{ topic: args.smallTopic, value: Buffer.alloc(args.bigSize, 120) }] })
    result.tooLarge = null
  } catch (err) { result.tooLarge = describeError(err) }
  const admin = new Admin(opts)
  try {
    await admin.createTopics({ topics: [args.badConfigTopic], partitions: 1, replicas: 1,
      configs: [{ name: 'cleanup.policy', value: 'bogus' }] })
    result.invalidConfig = null
  } catch (err) { result.invalidConfig = describeError(err) }
  await admin.close()
  try {
    const p = new Producer({ ...opts, strict: true, acks: 7 }) // strict: the client validates its options
    await p.close()
    result.clientConfig = null
  } catch (err) { result.clientConfig = describeError(err) }
  const sent = await producer.send({ acks: ProduceAcks.ALL, messages: [{ topic: args.okTopic, value: buf('after the errors') }] })
  result.ok = sent.offsets.map(o => [o.partition, Number(o.offset)])
  await producer.close()
  return result
}

main({ codecs, idempotent, transactions, copy, group, errors })
