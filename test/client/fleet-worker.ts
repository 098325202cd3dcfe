/**
 * One worker of a fleet, in its own process (forked, with an IPC channel):
 * says 'ready' once its client is set up, is told the epoch ms to start at,
 * then offers COUNT requests to TARGET, INTERVAL_MS apart, through a sluice
 * client that shares its quotas through Redis at REDIS_URL when SHARED=1.
 * Sends back the statuses it got and exits.
 */
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import { createClient } from '../../src/client/index.ts'
import { RedisStore } from '../../src/index.ts'
import { offer } from './servers.ts'

const env = (name: string) => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`${name} is not set`)
  return value
}
if (process.send === undefined) throw new Error('run this worker with fork(): it talks to the test over IPC')

const store = process.env.SHARED === '1' ? new RedisStore({ url: env('REDIS_URL') }) : undefined
const client = createClient(store === undefined ? {} : { store })
// Connected before the start: a decision made while the connection is still
// coming up times out and falls back to this process's own count (by design),
// which on a loaded machine turned the fleet's first shared window into four.
await store?.ping()
process.send('ready')
const [startAt] = (await once(process, 'message')) as [number]
const wait = startAt - Date.now()
if (wait > 0) await sleep(wait)
const statuses = await offer(Number(env('COUNT')), Number(env('INTERVAL_MS')), () => client.fetch(env('TARGET')))
await store?.close()
process.send(statuses, () => process.disconnect())
