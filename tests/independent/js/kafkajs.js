'use strict'
// kafkajs 2.2.4 driver: pure JavaScript, its own protocol implementation (no librdkafka).
// Codecs: gzip built in; snappy (kafkajs-snappy) and lz4 (kafkajs-lz4) are the codec packages kafkajs' docs name;
// its zstd package (@kafkajs/zstd, over cppzst) does not compile against Node 20's headers, so zstd is the same
// two-function codec interface over zstd-napi (the reference zstd library, bundled and built from source).
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const LZ4Codec = require('kafkajs-lz4')
const zstd = require('zstd-napi')
const { emit, log, sleep, describeError, recordOut, main } = require('./common')

CompressionCodecs[CompressionTypes.Snappy] = require('kafkajs-snappy')
CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec
CompressionCodecs[CompressionTypes.ZSTD] = () => ({
  async compress (encoder) { return zstd.compress(encoder.buffer) },
  async decompress (buffer) { return zstd.decompress(buffer) }
})

const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD
}

function kafka (args, retry) {
  return new Kafka({
    clientId: 'oncelog-independent-kafkajs',
    brokers: [args.bootstrap],
    connectionTimeout: 3000,
    requestTimeout: 15000,
    retry: retry || { retries: 30, initialRetryTime: 100, maxRetryTime: 1000 },
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, level, label, log: entry }) => {
      const { message, ...extra } = entry
      log(`kafkajs ${label} [${namespace}] ${message}`, extra)
    }
  })
}

const toMessage = r => ({
  key: r.key,
  value: r.value,
  headers: Object.fromEntries((r.headers || []).map(([k, v]) => [k, v])),
  ...(r.partition !== undefined ? { partition: r.partition } : {})
})

// Every record of `topics` from the beginning, through a group consumer of its own (kafkajs has no assign()),
// until `count` records arrived and nothing more came for `quietMs`.
async function readAll (client, topics, count, { readUncommitted = false, quietMs = 500, timeoutMs = 30000 } = {}) {
  const consumer = client.consumer({ groupId: `reader-${process.pid}-${Date.now()}`, readUncommitted,
    maxWaitTimeInMs: 100, allowAutoTopicCreation: false })
  const out = []
  let last = Date.now()
  await consumer.connect()
  try {
    for (const topic of topics) await consumer.subscribe({ topic, fromBeginning: true })
    await consumer.run({
      eachMessage: async ({ topic, partition, message: m }) => {
        out.push([topic, ...recordOut(partition, m.offset, m.key, m.value, m.headers)])
        last = Date.now()
      }
    })
    const deadline = Date.now() + timeoutMs
    while (Date.now() < deadline && !(out.length >= count && Date.now() - last >= quietMs)) await sleep(50)
  } finally {
    await consumer.disconnect()
  }
  return out
}

async function codecs (args) {
  const client = kafka(args)
  const producer = client.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const sent = {}
  for (const { codec, topic } of args.cases) {
    const acks = await producer.send({ topic, acks: -1, compression: CODECS[codec], messages: args.records.map(toMessage) })
    sent[codec] = acks.map(s => [s.partition, Number(s.baseOffset)])
  }
  const consumed = await readAll(client, args.cases.map(c => c.topic), args.records.length * args.cases.length)
  const result = {}
  for (const { codec, topic } of args.cases) {
    result[codec] = { sent: sent[codec], consumed: consumed.filter(r => r[0] === topic).map(r => r.slice(1)) }
  }
  await producer.disconnect()
  return result
}

// Idempotent producer through a broker SIGKILL: chunks of records sent one after another, each retried until
// the broker is back (kafkajs allows idempotence only with maxInFlightRequests 1).
async function idempotent (args) {
  const client = kafka(args, { retries: 1000, initialRetryTime: 100, maxRetryTime: 500 })
  const producer = client.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false })
  await producer.connect()
  let acked = 0
  const errors = []
  while (acked < args.count) {
    const n = Math.min(args.chunk, args.count - acked)
    const messages = Array.from({ length: n }, (_, i) => ({ partition: 0, value: String(acked + i) }))
    try {
      await producer.send({ topic: args.topic, acks: -1, messages })
    } catch (err) {
      // kafkajs' own retries gave up (e.g. the broker was down longer than they last): the application sends
      // the same chunk again, as an application using kafkajs would, and the sequence numbers must still hold
      errors.push(describeError(err))
      if (errors.length > 20) throw err
      await sleep(200)
      continue
    }
    acked += n
    emit({ event: 'acked', acked })
  }
  await producer.disconnect()
  return { acked, errors }
}

async function transactions (args) {
  const client = kafka(args)
  const producer = client.producer({ transactionalId: args.tid, idempotent: true, maxInFlightRequests: 1,
    allowAutoTopicCreation: false })
  await producer.connect()
  for (const batch of args.batches) {
    const txn = await producer.transaction()
    await txn.send({ topic: args.topic, acks: -1, messages: batch.records.map(toMessage) })
    if (batch.commit) await txn.commit()
    else await txn.abort()
    emit({ event: batch.commit ? 'committed' : 'aborted' })
  }
  await producer.disconnect()
  const consumed = await readAll(client, [args.topic], args.expectCommitted)
  return { consumed: consumed.map(r => r.slice(1)) }
}

// One member of an exactly-once copier group: each transaction copies up to `maxPerTxn` records of one
// partition and commits the input offsets with sendOffsets; between produce and commit it pauses `pauseMs` and
// says so, so that pytest's SIGKILL lands inside open transactions.
async function copy (args, ctx) {
  const client = kafka(args, { retries: 50, initialRetryTime: 100, maxRetryTime: 1000 })
  const producer = client.producer({ transactionalId: args.tid, idempotent: true, maxInFlightRequests: 1,
    allowAutoTopicCreation: false })
  const consumer = client.consumer({ groupId: args.group, sessionTimeout: args.sessionTimeout,
    heartbeatInterval: 500, rebalanceTimeout: args.sessionTimeout, maxWaitTimeInMs: 200, readUncommitted: false,
    allowAutoTopicCreation: false })
  await producer.connect()
  // kafkajs sends InitProducerId with the transactional id only when the first transaction begins; an empty
  // transaction does it now (Kafka's initTransactions()), fencing a previous incarnation and aborting what it
  // left open, before this member takes partitions
  await (await producer.transaction()).abort()
  await consumer.connect()
  consumer.on(consumer.events.GROUP_JOIN, e => emit({ event: 'joined', assignment: e.payload.memberAssignment }))
  await consumer.subscribe({ topic: args.input, fromBeginning: true })
  let total = 0
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
      for (let i = 0; i < batch.messages.length; i += args.maxPerTxn) {
        if (!isRunning() || isStale() || ctx.stopping()) return
        const chunk = batch.messages.slice(i, i + args.maxPerTxn)
        const next = String(Number(chunk[chunk.length - 1].offset) + 1)
        const txn = await producer.transaction()
        try {
          await txn.send({ topic: args.output, acks: -1,
            messages: chunk.map(m => ({ key: m.key, value: m.value })) })
          emit({ event: 'in_txn', partition: batch.partition, records: chunk.length })
          await sleep(args.pauseMs)
          await txn.sendOffsets({ consumerGroupId: args.group,
            topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: next }] }] })
          await txn.commit()
        } catch (err) {
          log('copy: transaction failed, aborting', describeError(err))
          await txn.abort().catch(() => {})
          throw err
        }
        resolveOffset(chunk[chunk.length - 1].offset)
        total += chunk.length
        emit({ event: 'committed', partition: batch.partition, records: chunk.length, total })
        await heartbeat()
      }
    }
  })
  while (!ctx.stopping()) await sleep(100)
  await consumer.disconnect()
  await producer.disconnect()
  return { total }
}

// Consumer group: A alone, then B joins (rebalance), then A leaves (B takes all), then B leaves, then C resumes
// from the group's committed offsets. Between the phases the driver produces `perPhase` records per partition.
async function group (args) {
  const client = kafka(args)
  const producer = client.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const produce = async phase => {
    const messages = []
    for (let p = 0; p < args.partitions; p++) {
      for (let i = 0; i < args.perPhase; i++) messages.push({ partition: p, key: `${phase}-${p}`, value: `${phase}-${p}-${i}` })
    }
    await producer.send({ topic: args.topic, acks: -1, messages })
  }
  const members = {}
  const start = async name => {
    const m = { name, assignment: [], records: [], joins: 0 }
    m.consumer = client.consumer({ groupId: args.group, sessionTimeout: 10000, heartbeatInterval: 300,
      rebalanceTimeout: 10000, maxWaitTimeInMs: 100, allowAutoTopicCreation: false })
    m.consumer.on(m.consumer.events.GROUP_JOIN, e => {
      m.joins++
      m.assignment = (e.payload.memberAssignment[args.topic] || []).slice().sort()
    })
    await m.consumer.connect()
    await m.consumer.subscribe({ topic: args.topic, fromBeginning: true })
    await m.consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        m.records.push(recordOut(partition, message.offset, message.key, message.value, message.headers))
        await m.consumer.commitOffsets([{ topic: args.topic, partition, offset: String(Number(message.offset) + 1) }])
      }
    })
    members[name] = m
    return m
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
  await produce('p2')
  await waitFor('A and B to read phase 2', () => seen([a, b]) >= args.partitions * args.perPhase)
  snapshot('p2', [a, b])
  await a.consumer.disconnect()
  await waitFor('B to take every partition', () => b.joins > 1 && covers([b]))
  await produce('p3')
  await waitFor('B to read phase 3', () => seen([b]) >= args.partitions * args.perPhase)
  snapshot('p3', [b])
  await b.consumer.disconnect()
  await produce('p4')
  const c = await start('C')
  await waitFor('C to read phase 4', () => seen([c]) >= args.partitions * args.perPhase)
  await sleep(500) // anything C reads beyond phase 4 (a re-delivery) would arrive by now
  snapshot('p4', [c])
  await c.consumer.disconnect()
  await producer.disconnect()
  return { phases }
}

async function errors (args) {
  const out = {}
  const client = kafka(args, { retries: 2, initialRetryTime: 100, maxRetryTime: 300 })
  const producer = client.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  try {
    await producer.send({ topic: args.missingTopic, acks: -1, messages: [{ value: 'x' }] })
    out.unknownTopic = null
  } catch (err) { out.unknownTopic = describeError(err) }
  try {
    await producer.send({ topic: args.smallTopic, acks: -1, messages: [{ value: 'x'.repeat(args.bigSize) }] })
    out.tooLarge = null
  } catch (err) { out.tooLarge = describeError(err) }
  const admin = client.admin()
  await admin.connect()
  try {
    await admin.createTopics({ topics: [{ topic: args.badConfigTopic, numPartitions: 1,
      configEntries: [{ name: 'cleanup.policy', value: 'bogus' }] }] })
    out.invalidConfig = null
  } catch (err) { out.invalidConfig = describeError(err) }
  await admin.disconnect()
  try {
    client.producer({ idempotent: true, retry: { retries: 0 } })
    out.clientConfig = null
  } catch (err) { out.clientConfig = describeError(err) }
  const sent = await producer.send({ topic: args.okTopic, acks: -1, messages: [{ value: 'after the errors' }] })
  out.ok = sent.map(s => [s.partition, Number(s.baseOffset)])
  await producer.disconnect()
  return out
}

main({ codecs, idempotent, transactions, copy, group, errors })
