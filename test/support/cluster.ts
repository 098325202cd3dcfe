/**
 * A real 3-master Redis Cluster on loopback ports, started for a test suite:
 * three redis-server processes in cluster mode joined by `redis-cli --cluster create`.
 */
import { spawnSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Redis } from 'ioredis'
import { startRedis, type RedisServer } from './redis.ts'

export interface RedisCluster {
  nodes: RedisServer[]
  stop(): Promise<void>
}

/**
 * `replicas` per master, each synced before this resolves (a replica that has
 * not synced refuses to take over). `nodeTimeoutMs`: how long a node may be
 * unreachable before the others fail it over.
 */
export async function startCluster(masters = 3, options: { replicas?: number; nodeTimeoutMs?: number } = {}): Promise<RedisCluster> {
  const replicas = options.replicas ?? 0
  const settings = ['--cluster-enabled', 'yes', '--cluster-node-timeout', String(options.nodeTimeoutMs ?? 2000), '--repl-diskless-sync-delay', '0']
  const nodes = await Promise.all(Array.from({ length: masters * (1 + replicas) }, () => startRedis(settings)))
  const stop = async () => { await Promise.all(nodes.map((node) => node.stop())) }
  const create = spawnSync(
    'redis-cli',
    ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', String(replicas), '--cluster-yes'],
    { encoding: 'utf8', timeout: 30_000 },
  )
  if (create.status !== 0) {
    await stop()
    throw new Error(`redis-cli --cluster create failed:\n${create.stdout}\n${create.stderr}`)
  }
  const ask = (node: RedisServer, ...command: string[]) => spawnSync('redis-cli', ['-p', String(node.port), ...command], { encoding: 'utf8' }).stdout
  const deadline = Date.now() + 20_000
  while (Date.now() < deadline) {
    const ready = nodes.every((node) => ask(node, 'CLUSTER', 'INFO').includes('cluster_state:ok')) &&
      nodes.filter((node) => ask(node, 'INFO', 'replication').includes('master_link_status:up')).length === masters * replicas
    if (ready) return { nodes, stop }
    await sleep(100)
  }
  await stop()
  throw new Error('the cluster did not reach cluster_state:ok, with every replica synced, within 20 s')
}

/**
 * Moves a slot to the next master, as `redis-cli --cluster reshard` does: the
 * slot marked migrating and importing, its keys sent over a few at a time
 * (with `pauseMs` between batches, so callers meet it half moved), then
 * given to the new owner on every node. Returns the indices of both owners.
 */
export async function moveSlot(cluster: RedisCluster, slot: number, pauseMs = 2): Promise<{ from: number; to: number }> {
  const nodes = cluster.nodes.map((node) => node.client())
  const ids = await Promise.all(nodes.map(async (node) => String(await node.cluster('MYID'))))
  const ranges = (await (nodes[0] as Redis).cluster('SLOTS')) as unknown as Array<[number, number, [string, number, string]]>
  const owner = ranges.find(([first, last]) => first <= slot && slot <= last)?.[2][2]
  const from = ids.indexOf(owner ?? '')
  if (from === -1) throw new Error(`no master holds slot ${slot}`)
  const to = (from + 1) % nodes.length
  const [source, target] = [nodes[from] as Redis, nodes[to] as Redis]
  await target.cluster('SETSLOT', slot, 'IMPORTING', ids[from] as string)
  await source.cluster('SETSLOT', slot, 'MIGRATING', ids[to] as string)
  for (let batch = 0; batch < 10_000; batch++) {
    const keys = (await source.cluster('GETKEYSINSLOT', slot, 5)) as string[]
    if (keys.length === 0) break
    await source.migrate('127.0.0.1', (cluster.nodes[to] as RedisServer).port, '', 0, 5000, 'KEYS', ...keys)
    await sleep(pauseMs)
  }
  for (const node of nodes) await node.cluster('SETSLOT', slot, 'NODE', ids[to] as string)
  return { from, to }
}
