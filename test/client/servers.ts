/**
 * Plain HTTP servers that limit with their own fixed window (aligned to whole
 * seconds, as most APIs do) and announce it in one header dialect each. They
 * are written by hand, not with sluice, so the client is tested against what
 * other servers send.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

export type Dialect = 'draft-10' | 'draft-7' | 'draft-6' | 'github' | 'retry-after-seconds' | 'retry-after-date'
export const DIALECTS: readonly Dialect[] = ['draft-10', 'draft-7', 'draft-6', 'github', 'retry-after-seconds', 'retry-after-date']

export interface LimitedServer {
  url: string
  windowMs: number
  /** Refusals per window (window index = epoch second / windowSeconds). */
  refusedByWindow: Map<number, number>
  admitted: number
  refused: number
  /** Epoch ms of every request that reached the server, in order. */
  arrivals: Array<{ at: number; method: string; path: string; status: number }>
  close(): Promise<void>
}

export interface ServerOptions {
  dialect: Dialect
  limit: number
  windowSeconds?: number
  /** Status for a refusal. Default 429. */
  status?: number
  /** Units a request takes, as its `x-units` header says (an API counting tokens or credits). Default: 1 each. */
  unitsFromHeader?: boolean
}

export async function startLimitedServer(options: ServerOptions): Promise<LimitedServer> {
  const windowMs = (options.windowSeconds ?? 1) * 1000
  const counts = new Map<number, number>()
  const state: Omit<LimitedServer, 'url' | 'close'> = { windowMs, refusedByWindow: new Map(), admitted: 0, refused: 0, arrivals: [] }
  const server: Server = createServer((request, response) => {
    const now = Date.now()
    const window = Math.floor(now / windowMs)
    const units = options.unitsFromHeader === true ? Number(request.headers['x-units'] ?? 1) : 1
    const used = (counts.get(window) ?? 0) + units
    const allowed = used <= options.limit
    if (allowed) counts.set(window, used)
    counts.delete(window - 2)
    const remaining = Math.max(0, options.limit - Math.min(used, options.limit))
    const resetMs = (window + 1) * windowMs - now
    const reset = Math.ceil(resetMs / 1000)
    const headers: Record<string, string> = {}
    const w = windowMs / 1000
    switch (options.dialect) {
      case 'draft-10':
        headers['RateLimit-Policy'] = `"window";q=${options.limit};w=${w}`
        headers.RateLimit = `"window";r=${remaining};t=${reset}`
        break
      case 'draft-7':
        headers['RateLimit-Policy'] = `${options.limit};w=${w}`
        headers.RateLimit = `limit=${options.limit}, remaining=${remaining}, reset=${reset}`
        break
      case 'draft-6':
        headers['RateLimit-Limit'] = String(options.limit)
        headers['RateLimit-Remaining'] = String(remaining)
        headers['RateLimit-Reset'] = String(reset)
        break
      case 'github':
        headers['X-RateLimit-Limit'] = String(options.limit)
        headers['X-RateLimit-Remaining'] = String(remaining)
        headers['X-RateLimit-Used'] = String(Math.min(used, options.limit))
        headers['X-RateLimit-Reset'] = String(((window + 1) * windowMs) / 1000)
        headers['X-RateLimit-Resource'] = 'core'
        break
      default:
        break
    }
    if (!allowed) {
      headers['Retry-After'] = options.dialect === 'retry-after-date' ? new Date((window + 1) * windowMs).toUTCString() : String(reset)
      state.refused++
      state.refusedByWindow.set(window, (state.refusedByWindow.get(window) ?? 0) + 1)
    } else {
      state.admitted++
    }
    const status = allowed ? 200 : (options.status ?? 429)
    state.arrivals.push({ at: now, method: request.method ?? '', path: request.url ?? '', status })
    request.resume()
    request.on('end', () => {
      response.writeHead(status, { 'content-type': 'text/plain', ...headers })
      response.end(allowed ? 'ok' : 'slow down')
    })
  })
  server.keepAliveTimeout = 5000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return Object.assign(state, {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    }),
  }) as LimitedServer
}

/** Waits until just after the next whole second, when the servers' windows open. */
export async function nextWindow(): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 1000 - (Date.now() % 1000) + 20))
}

/**
 * Offers `count` requests at `intervalMs` apart (open loop: each starts on
 * schedule whatever happened to the others) and waits for all of them.
 */
export async function offer(count: number, intervalMs: number, send: (index: number) => Promise<Response>): Promise<number[]> {
  const pending: Array<Promise<number>> = []
  for (let i = 0; i < count; i++) {
    pending.push(send(i).then(async (response) => {
      await response.arrayBuffer()
      return response.status
    }))
    await new Promise((resolve) => setTimeout(resolve, intervalMs))
  }
  return Promise.all(pending)
}

/**
 * Refusals in each window after the first window that saw any request, or with
 * `fromFirstRefusal`, after the window of the first refusal: a client that the
 * server tells nothing but `Retry-After` learns the limit from its first 429,
 * and on a slow machine the requests it sent before can reach a second window.
 */
export function refusalsAfterFirstWindow(server: LimitedServer, fromFirstRefusal = false): number[] {
  const windows = server.arrivals.map((arrival) => Math.floor(arrival.at / server.windowMs))
  const refusals = server.arrivals.filter((arrival) => arrival.status !== 200).map((arrival) => Math.floor(arrival.at / server.windowMs))
  const first = fromFirstRefusal && refusals.length > 0 ? Math.min(...refusals) : Math.min(...windows)
  const last = Math.max(...windows)
  const counts: number[] = []
  for (let window = first + 1; window <= last; window++) counts.push(server.refusedByWindow.get(window) ?? 0)
  return counts
}
