/**
 * The admin listener (its own port, loopback by default): `/metrics` for
 * Prometheus, `/status` for people, `/healthz` and `/readyz` for orchestrators.
 */
import { createServer, type Server, type ServerResponse } from 'node:http'
import { exposition } from '../metrics/exposition.ts'
import type { Gateway } from './gateway.ts'

export function createAdminServer(gateway: Gateway): Server {
  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'text/plain', 'GET only\n')
    switch (path) {
      case '/metrics':
        exposition(gateway.metrics.registry).then(
          (text) => send(res, 200, gateway.metrics.registry.contentType, text),
          (error: Error) => send(res, 500, 'text/plain', `${error.message}\n`),
        )
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

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' })
  res.end(res.req.method === 'HEAD' ? undefined : body)
}
