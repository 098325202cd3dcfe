/**
 * The admin listener (its own port, loopback by default): `/metrics` for
 * Prometheus, `/status` for people, `/healthz` and `/readyz` for orchestrators.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { createGzip } from 'node:zlib'
import { messageOf } from '../core/errors.ts'
import { prettyJsonSlices } from '../core/json-slices.ts'
import { letIoIn, mapInSlices } from '../core/turn.ts'
import { expositionSlices } from '../metrics/exposition.ts'
import type { Gateway } from './gateway.ts'

export function createAdminServer(gateway: Gateway): Server {
  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'text/plain', 'GET only\n')
    switch (path) {
      case '/metrics':
        void sendSlices(gateway, req, res, gateway.metrics.registry.contentType, expositionSlices(gateway.metrics.registry), '/metrics')
        return
      case '/healthz':
        return send(res, 200, 'text/plain', 'ok\n')
      case '/readyz': {
        // Not ready while draining, or while the store is down and the failure policy refuses everything.
        const store = gateway.store
        const refusing = !store.up && gateway.config.store.type === 'redis' && gateway.config.store.onFailure === 'closed'
        const ready = !gateway.isDraining && !refusing
        return send(res, ready ? 200 : 503, 'text/plain', ready ? 'ready\n' : gateway.isDraining ? 'draining\n' : 'store down\n')
      }
      case '/status':
        void sendSlices(gateway, req, res, 'application/json', statusSlices(gateway), '/status')
        return
      default:
        return send(res, 404, 'text/plain', 'not found: try /metrics, /status, /healthz, /readyz\n')
    }
  })
}

/**
 * The gateway as people read it: routes, limits, store, and the watched keys'
 * quotas. With thousands of routes it is megabytes of JSON, built and written
 * a slice at a time so that the requests the gateway serves wait no more
 * than a slice.
 */
async function* statusSlices(gateway: Gateway): AsyncGenerator<string> {
  const config = gateway.config
  // Grouped by route in one pass: a config of thousands of routes would otherwise scan every limit for each route.
  const byOwner = new Map<string | undefined, Array<Record<string, unknown>>>()
  for (const limit of config.limitsResolved) {
    const shown = {
      name: limit.name,
      shadow: limit.config.shadow ?? config.shadow,
      cost: limit.cost,
      ...(limit.config.action === 'queue' ? { action: 'queue', maxWaitMs: limit.config.maxWaitMs ?? 10_000 } : {}),
      policies: Object.fromEntries([...limit.policies].map(([tier, list]) => [tier === '' ? 'all' : tier, list])),
    }
    const owned = byOwner.get(limit.route)
    if (owned === undefined) byOwner.set(limit.route, [shown])
    else owned.push(shown)
  }
  const policiesOf = (owner: string | undefined) => byOwner.get(owner) ?? []
  // Read now, with the config: a reload while the status is built does not mix two versions.
  const routes = gateway.routes
  const watched = await gateway.watched()
  const body = {
    version: config.version,
    file: config.file,
    startedAt: new Date(gateway.startedAt).toISOString(),
    draining: gateway.isDraining,
    store: gateway.store,
    globalLimits: policiesOf(undefined),
    routes: await mapInSlices(routes, ({ config: route, upstreams }) => ({
      name: route.name,
      match: route.match ?? {},
      upstream: route.upstream,
      upstreams: upstreams.states(route.healthCheck !== undefined),
      limits: policiesOf(route.name),
    })),
    watched,
  }
  yield* prettyJsonSlices(body)
  yield '\n'
}

/**
 * A body sent a slice at a time as it is written: a scrape of thousands of
 * routes in use is megabytes, which sent in one piece held the gateway's
 * thread. Compressed for a client that asks for it (Prometheus does): zlib
 * works on libuv's threads, and the text shrinks about twentyfold. A failure
 * before the first slice is a 500; one after it cuts the connection short,
 * which Prometheus counts as a failed scrape.
 */
async function sendSlices(gateway: Gateway, req: IncomingMessage, res: ServerResponse, type: string, slices: AsyncGenerator<string>, what: string): Promise<void> {
  if (req.method === 'HEAD') {
    await slices.return(undefined)
    return send(res, 200, type, '')
  }
  let first: IteratorResult<string>
  try {
    // Its turn first: several arriving together would each write a first slice before requests are let in.
    await letIoIn()
    first = await slices.next()
  } catch (error) {
    return send(res, 500, 'text/plain', `${messageOf(error)}\n`)
  }
  const gzip = acceptsGzip(req.headers['accept-encoding'])
  res.writeHead(200, { 'content-type': type, 'cache-control': 'no-store', vary: 'Accept-Encoding', ...(gzip ? { 'content-encoding': 'gzip' } : {}) })
  async function* text(): AsyncGenerator<string> {
    if (first.done === true) return
    yield first.value
    yield* slices
  }
  const body = Readable.from(text(), { objectMode: false })
  try {
    await (gzip ? pipeline(body, createGzip(), res) : pipeline(body, res))
  } catch (error) {
    // A client that hangs up midway is no failure of the gateway's.
    if ((error as { code?: string }).code !== 'ERR_STREAM_PREMATURE_CLOSE') gateway.logger.warn({ error: messageOf(error) }, `a ${what} request failed midway; its connection was cut`)
  }
}

/** Whether an `Accept-Encoding` field takes gzip (RFC 9110 12.5.3): named, or `*`, with a weight above 0. */
export function acceptsGzip(field: string | undefined): boolean {
  if (field === undefined) return false
  const weights = new Map<string, number>()
  for (const item of field.split(',')) {
    const [coding = '', ...parameters] = item.split(';').map((part) => part.trim().toLowerCase())
    const weight = parameters.find((parameter) => parameter.startsWith('q='))
    weights.set(coding, weight === undefined ? 1 : Number(weight.slice(2)))
  }
  const gzip = weights.get('gzip') ?? weights.get('x-gzip') ?? weights.get('*')
  return gzip !== undefined && gzip > 0
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' })
  res.end(res.req.method === 'HEAD' ? undefined : body)
}
