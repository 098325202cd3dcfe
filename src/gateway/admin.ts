/**
 * The admin listener (its own port, loopback by default): `/metrics` for
 * Prometheus, `/status` for people, `/healthz` and `/readyz` for orchestrators.
 */
import { createServer, type Server, type ServerResponse } from 'node:http'
import { messageOf } from '../core/errors.ts'
import { expositionSlices } from '../metrics/exposition.ts'
import type { Gateway } from './gateway.ts'

export function createAdminServer(gateway: Gateway): Server {
  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'text/plain', 'GET only\n')
    switch (path) {
      case '/metrics':
        void sendMetrics(gateway, res)
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
        status(gateway).then(
          (body) => send(res, 200, 'application/json', `${JSON.stringify(body, null, 2)}\n`),
          (error: Error) => send(res, 500, 'text/plain', `${error.message}\n`),
        )
        return
      default:
        return send(res, 404, 'text/plain', 'not found: try /metrics, /status, /healthz, /readyz\n')
    }
  })
}

async function status(gateway: Gateway): Promise<Record<string, unknown>> {
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
  const upstreams = gateway.upstreamStates()
  return {
    version: config.version,
    file: config.file,
    startedAt: new Date(gateway.startedAt).toISOString(),
    draining: gateway.isDraining,
    store: gateway.store,
    globalLimits: policiesOf(undefined),
    routes: config.routes.map((route) => ({
      name: route.name,
      match: route.match ?? {},
      upstream: route.upstream,
      upstreams: upstreams[route.name] ?? [],
      limits: policiesOf(route.name),
    })),
    watched: await gateway.watched(),
  }
}

/**
 * The Prometheus text, sent a slice at a time as it is written: with thousands
 * of routes in use a scrape is megabytes, which sent in one piece held the
 * gateway's thread. A failure before the first slice is a 500; one after it
 * cuts the connection short, which Prometheus counts as a failed scrape.
 */
async function sendMetrics(gateway: Gateway, res: ServerResponse): Promise<void> {
  const type = gateway.metrics.registry.contentType
  if (res.req.method === 'HEAD') return send(res, 200, type, '')
  const slices = expositionSlices(gateway.metrics.registry)
  let next: IteratorResult<string>
  try {
    next = await slices.next()
  } catch (error) {
    return send(res, 500, 'text/plain', `${messageOf(error)}\n`)
  }
  res.writeHead(200, { 'content-type': type, 'cache-control': 'no-store' })
  try {
    for (; next.done !== true; next = await slices.next()) {
      if (!res.write(next.value)) await drainedOrClosed(res)
      // A scraper that has gone reads no more: stop writing for it.
      if (res.destroyed) return void (await slices.return(undefined))
    }
    res.end()
  } catch (error) {
    res.destroy(error instanceof Error ? error : new Error(messageOf(error)))
  }
}

function drainedOrClosed(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done)
      res.off('close', done)
      resolve()
    }
    res.on('drain', done)
    res.on('close', done)
  })
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' })
  res.end(res.req.method === 'HEAD' ? undefined : body)
}
