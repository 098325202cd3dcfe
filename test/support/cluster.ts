/**
 * A real 3-master Redis Cluster on loopback ports, started for a test suite:
 * three redis-server processes in cluster mode joined by `redis-cli --cluster create`.
 */
import { spawnSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { startRedis, type RedisServer } from './redis.ts'

export interface RedisCluster {
  nodes: RedisServer[]
  stop(): Promise<void>
}

export async function startCluster(masters = 3): Promise<RedisCluster> {
  const nodes = await Promise.all(Array.from({ length: masters }, () => startRedis(['--cluster-enabled', 'yes', '--cluster-node-timeout', '2000'])))
  const stop = async () => { await Promise.all(nodes.map((node) => node.stop())) }
  const create = spawnSync(
    'redis-cli',
    ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'],
    { encoding: 'utf8', timeout: 30_000 },
  )
  if (create.status !== 0) {
    await stop()
    throw new Error(`redis-cli --cluster create failed:\n${create.stdout}\n${create.stderr}`)
  }
  const deadline = Date.now() + 20_000
  while (Date.now() < deadline) {
    const states = nodes.map((node) => spawnSync('redis-cli', ['-p', String(node.port), 'CLUSTER', 'INFO'], { encoding: 'utf8' }).stdout)
    if (states.every((info) => info.includes('cluster_state:ok'))) return { nodes, stop }
    await sleep(100)
  }
  await stop()
  throw new Error('the cluster did not reach cluster_state:ok within 20 s')
}
