'use strict'
// @confluentinc/kafka-javascript 1.10 driver, through its KafkaJS-compatible API (the one its docs lead with).
// It binds librdkafka (2.15.1, bundled and built from source at install, linked against the system's OpenSSL,
// zlib and zstd): every codec is librdkafka's.
const { Kafka, CompressionTypes, logLevel } = require('@confluentinc/kafka-javascript').KafkaJS
const { emit, log, sleep, describeError, recordOut, main } = require('./common')

const CODECS = {
  none: CompressionTypes.None, // the MIGRATION guide says NONE; the enum's key is None
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.SNAPPY,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD
}

function kafka (args) {
  return new Kafka({
    kafkaJS: {
      clientId: 'oncelog-independent-confluent',
      brokers: [args.bootstrap],
      logLevel: logLevel.WARN // its default logger writes warnings and errors to stderr
    }
  })
}

// librdkafka's settings the checks share: quick reconnects after the broker restarts, small batches sent at once
const RDKAFKA = { 'reconnect.backoff.ms': 50, 'reconnect.backoff.max.ms': 500, 'linger.ms': 5 }

const toMessage = r => ({
  key: r.key,
  value: r.value,
  headers: Object.fromEntries((r.headers || []).map(([k, v]) => [k, v])),
  ...(r.partition !== undefined ? { partition: r.partition } : {})
})

// Every record of `topics` from the beginning through a group consumer of its own, until `count` records
// arrived and nothing more came for `quietMs`.
async function readAll (client, topics, count, { readUncommitted = false, quietMs = 500, timeoutMs = 30000 } = {}) {
  const consumer = client.consumer({
    kafkaJS: { groupId: `reader-${process.pid}-${Date.now()}`, fromBeginning: true, autoCommit: false,
      readUncommitted, allowAutoTopicCreation: false, maxWaitTimeInMs: 100 },
    ...RDKAFKA
  })
  const records = []
  let last = Date.now()
  await consumer.connect()
  try {
    await consumer.subscribe({ topics })
    await consumer.run({
      eachMessage: async ({ topic, partition, message: m }) => {
        records.push([topic, ...recordOut(partition, m.offset, m.key, m.value, m.headers)])
        last = Date.now()
      }
    })
    const deadline = Date.now() + timeoutMs
    while (Date.now() < deadline && !(records.length >= count && Date.now() - last >= quietMs)) await sleep(50)
  } finally {
    await consumer.disconnect()
  }
  return records
}

async function codecs (args) {
  const client = kafka(args)
  const sent = {}
  for (const { codec, topic } of args.cases) {
    const producer = client.producer({ kafkaJS: { acks: -1, compression: CODECS[codec], allowAutoTopicCreation: false },
      ...RDKAFKA })
    await producer.connect()
    const acks = await producer.send({ topic, messages: args.records.map(toMessage) })
    sent[codec] = acks.map(s => [s.partition, Number(s.baseOffset)])
    await producer.disconnect()
  }
  const consumed = await readAll(client, args.cases.map(c => c.topic), args.records.length * args.cases.length)
  const result = {}
  for (const { codec, topic } of args.cases) {
    result[codec] = { sent: sent[codec], consumed: consumed.filter(r => r[0] === topic).map(r => r.slice(1)) }
  }
  return result
}

// Idempotent producer through a broker SIGKILL: chunks sent one after another; librdkafka retries each until
// the broker is back (message.timeout.ms bounds it), with up to 5 requests in flight.
async function idempotent (args) {
  const client = kafka(args)
  const producer = client.producer({ kafkaJS: { idempotent: true, acks: -1, allowAutoTopicCreation: false },
    ...RDKAFKA, 'message.timeout.ms': 60000 })
  await producer.connect()
  let acked = 0
  const errors = []
  while (acked < args.count) {
    const n = Math.min(args.chunk, args.count - acked)
    const messages = Array.from({ length: n }, (_, i) => ({ partition: 0, value: String(acked + i) }))
    try {
      await producer.send({ topic: args.topic, messages })
    } catch (err) {
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
  const producer = client.producer({ kafkaJS: { transactionalId: args.tid, allowAutoTopicCreation: false },
    ...RDKAFKA })
  await producer.connect() // initTransactions
  for (const batch of args.batches) {
    const txn = await producer.transaction()
    await txn.send({ topic: args.topic, messages: batch.records.map(toMessage) })
    if (batch.commit) await txn.commit()
    else await txn.abort()
    emit({ event: batch.commit ? 'committed' : 'aborted' })
  }
  await producer.disconnect()
  const consumed = await readAll(client, [args.topic], args.expectCommitted)
  return { consumed: consumed.map(r => r.slice(1)) }
}

// One member of an exactly-once copier group: each eachBatch (at most `maxPerTxn` records of one partition) is
// one transaction whose input offsets go in with sendOffsets({ consumer }); between produce and commit it
// pauses `pauseMs` and says so, so that pytest's SIGKILL lands inside open transactions.
async function copy (args, ctx) {
  const client = kafka(args)
  const producer = client.producer({ kafkaJS: { transactionalId: args.tid, allowAutoTopicCreation: false },
    ...RDKAFKA })
  const consumer = client.consumer({
    kafkaJS: { groupId: args.group, fromBeginning: true, autoCommit: false, readUncommitted: false,
      sessionTimeout: args.sessionTimeout, rebalanceTimeout: args.sessionTimeout, heartbeatInterval: 500,
      maxWaitTimeInMs: 200, allowAutoTopicCreation: false },
    ...RDKAFKA,
    'js.consumer.max.batch.size': args.maxPerTxn
  })
  await producer.connect() // initTransactions: fences a previous incarnation, aborting what it left open
  await consumer.connect()
  await consumer.subscribe({ topics: [args.input] })
  let total = 0
  await consumer.run({
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, isRunning, isStale }) => {
      if (!isRunning() || isStale() || ctx.stopping() || batch.messages.length === 0) return
      const msgs = batch.messages
      const next = String(Number(msgs[msgs.length - 1].offset) + 1)
      const txn = await producer.transaction()
      try {
        await txn.send({ topic: args.output, messages: msgs.map(m => ({ key: m.key, value: m.value })) })
        emit({ event: 'in_txn', partition: batch.partition, records: msgs.length })
        await sleep(args.pauseMs)
        await txn.sendOffsets({ consumer,
          topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: next }] }] })
        await txn.commit()
      } catch (err) {
        log('copy: transaction failed, aborting', describeError(err))
        await txn.abort().catch(() => {})
        throw err
      }
      resolveOffset(msgs[msgs.length - 1].offset)
      total += msgs.length
      emit({ event: 'committed', partition: batch.partition, records: msgs.length, total })
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
  const producer = client.producer({ kafkaJS: { acks: -1, allowAutoTopicCreation: false }, ...RDKAFKA })
  await producer.connect()
  const produce = async phase => {
    const messages = []
    for (let p = 0; p < args.partitions; p++) {
      for (let i = 0; i < args.perPhase; i++) messages.push({ partition: p, key: `${phase}-${p}`, value: `${phase}-${p}-${i}` })
    }
    await producer.send({ topic: args.topic, messages })
  }
  const start = async name => {
    const m = { name, assignment: [], records: [], joins: 0 }
    m.consumer = client.consumer({
      kafkaJS: { groupId: args.group, fromBeginning: true, autoCommit: false, sessionTimeout: 10000,
        rebalanceTimeout: 10000, heartbeatInterval: 300, maxWaitTimeInMs: 100, allowAutoTopicCreation: false },
      ...RDKAFKA,
      rebalance_cb: (err, assignment) => {
        // after librdkafka's own handling: the assignment as the group gave it
        if (err.code === -175) { // ERR__ASSIGN_PARTITIONS
          m.joins++
          m.assignment = assignment.filter(a => a.topic === args.topic).map(a => a.partition).sort()
        } else if (err.code === -174) { // ERR__REVOKE_PARTITIONS
          m.assignment = []
        }
      }
    })
    await m.consumer.connect()
    await m.consumer.subscribe({ topics: [args.topic] })
    await m.consumer.run({
      eachMessage: async ({ partition, message }) => {
        m.records.push(recordOut(partition, message.offset, message.key, message.value, message.headers))
        await m.consumer.commitOffsets([{ topic: args.topic, partition, offset: String(Number(message.offset) + 1) }])
      }
    })
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
  const client = kafka(args)
  // librdkafka holds a record for an unknown topic until topic.metadata.propagation.max.ms (30 s by default)
  const producer = client.producer({ kafkaJS: { acks: -1, allowAutoTopicCreation: false }, ...RDKAFKA,
    'topic.metadata.propagation.max.ms': 1000, 'message.timeout.ms': 10000 })
  await producer.connect()
  try {
    await producer.send({ topic: args.missingTopic, messages: [{ value: 'x' }] })
    out.unknownTopic = null
  } catch (err) { out.unknownTopic = describeError(err) }
  try {
    await producer.send({ topic: args.smallTopic, messages: [{ value: 'x'.repeat(args.bigSize) }] })
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
    const p = client.producer({ 'no.such.property': 'x' })
    await p.connect()
    await p.disconnect()
    out.clientConfig = null
  } catch (err) { out.clientConfig = describeError(err) }
  const sent = await producer.send({ topic: args.okTopic, messages: [{ value: 'after the errors' }] })
  out.ok = sent.map(s => [s.partition, Number(s.baseOffset)])
  await producer.disconnect()
  return out
}

main({ codecs, idempotent, transactions, copy, group, errors })
