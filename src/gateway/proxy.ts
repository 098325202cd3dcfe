/**
 * Forwards one request to an upstream with undici and streams the answer back:
 * bodies flow both ways with backpressure (nothing is buffered whole),
 * hop-by-hop headers stay on their hop, `X-Forwarded-*` tell the upstream who
 * asked, and upstream failures become 502 (unreachable, broken) or 504 (too slow).
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { pipeline } from 'node:stream/promises'
import { Agent, errors, type Dispatcher } from 'undici'
import type { RouteConfig } from './config.ts'

/** RFC 9110 7.6.1: meaningful for one connection only, never forwarded. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'])

export interface UpstreamTimeouts {
  /** Longest wait for the response headers. */
  headersMs: number
  /** Longest silence while a body streams. */
  bodyMs: number
}

export interface ProxyOutcome {
  status: number
  /** Why the upstream could not answer, when it could not. */
  failure: 'unreachable' | 'timeout' | 'broken' | 'client-gone' | undefined
}

/** One route's upstreams, taken in turn, over a shared keep-alive pool. */
export class Upstreams {
  private next = 0
  private readonly bases: Array<{ origin: string; path: string; host: string }>

  constructor(route: RouteConfig) {
    const urls = Array.isArray(route.upstream) ? route.upstream : [route.upstream]
    this.bases = urls.map((url) => {
      const parsed = new URL(url)
      return { origin: parsed.origin, path: parsed.pathname.replace(/\/$/, ''), host: parsed.host }
    })
  }

  /** Round-robin. */
  pick(): { origin: string; path: string; host: string } {
    const base = this.bases[this.next % this.bases.length] as Upstreams['bases'][number]
    this.next = (this.next + 1) % this.bases.length
    return base
  }
}

/** The keep-alive pools every route shares (one per upstream origin inside the Agent). */
export function createAgent(keepAliveMs: number): Agent {
  return new Agent({ keepAliveTimeout: keepAliveMs, connections: 256, pipelining: 1 })
}

/** Compiles a route's path rewriting: strip a prefix, then a regex replacement. */
export function pathRewriter(route: RouteConfig): (path: string) => string {
  const strip = route.stripPrefix === '/' ? undefined : route.stripPrefix
  const rewrite = route.rewrite === undefined ? undefined : { pattern: new RegExp(route.rewrite.pattern), replacement: route.rewrite.replacement }
  return (path) => {
    let result = path
    if (strip !== undefined && (result === strip || result.startsWith(`${strip}/`))) result = result.slice(strip.length) || '/'
    if (rewrite !== undefined) result = result.replace(rewrite.pattern, rewrite.replacement)
    return result.startsWith('/') ? result : `/${result}`
  }
}

export interface ForwardOptions {
  dispatcher: Dispatcher
  upstreams: Upstreams
  rewrite: (path: string) => string
  preserveHost: boolean
  timeouts: UpstreamTimeouts
  /** `http` or `https`: how the client reached the gateway. */
  protocol: string
  /** Headers to add to the response (rate-limit fields). */
  extraHeaders: ReadonlyArray<[string, string]>
}

export async function forward(req: IncomingMessage, res: ServerResponse, options: ForwardOptions): Promise<ProxyOutcome> {
  const base = options.upstreams.pick()
  const url = req.url ?? '/'
  const queryAt = url.indexOf('?')
  const path = queryAt === -1 ? url : url.slice(0, queryAt)
  const query = queryAt === -1 ? '' : url.slice(queryAt)
  const target = `${base.path}${options.rewrite(path)}${query}`

  const headers = requestHeaders(req, options, base.host)
  const abort = new AbortController()
  // The client went away: stop the upstream work too.
  const onClose = () => { if (!res.writableFinished) abort.abort() }
  res.once('close', onClose)
  const hasBody = req.headers['content-length'] !== undefined ? req.headers['content-length'] !== '0' : req.headers['transfer-encoding'] !== undefined
  let upstream: Dispatcher.ResponseData
  try {
    upstream = await options.dispatcher.request({
      origin: base.origin,
      path: target,
      method: req.method as Dispatcher.HttpMethod,
      headers,
      body: hasBody ? req : null,
      headersTimeout: options.timeouts.headersMs,
      bodyTimeout: options.timeouts.bodyMs,
      signal: abort.signal,
    })
  } catch (error) {
    res.off('close', onClose)
    if (abort.signal.aborted) return { status: 499, failure: 'client-gone' }
    const timeout = isTimeout(error)
    const status = timeout ? 504 : 502
    if (!res.headersSent) {
      res.writeHead(status, [...flatten(options.extraHeaders), 'content-type', 'application/problem+json', 'connection', 'close'])
      res.end(JSON.stringify({
        type: 'about:blank',
        title: timeout ? 'Gateway Timeout' : 'Bad Gateway',
        status,
        detail: timeout ? 'The upstream did not answer in time.' : 'The upstream could not be reached.',
      }))
    } else {
      res.destroy()
    }
    return { status, failure: timeout ? 'timeout' : 'unreachable' }
  }
  const responseHeaders: string[] = []
  const dropped = connectionTokens(upstream.headers.connection)
  for (const [name, value] of Object.entries(upstream.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || dropped.has(name)) continue
    if (Array.isArray(value)) for (const item of value) responseHeaders.push(name, item)
    else responseHeaders.push(name, value)
  }
  responseHeaders.push(...flatten(options.extraHeaders))
  res.writeHead(upstream.statusCode, responseHeaders)
  try {
    await pipeline(upstream.body, res)
    return { status: upstream.statusCode, failure: undefined }
  } catch {
    // Headers are out: all that is left is to cut the response short so the client sees it incomplete.
    res.destroy()
    upstream.body.destroy()
    return { status: upstream.statusCode, failure: abort.signal.aborted ? 'client-gone' : 'broken' }
  } finally {
    res.off('close', onClose)
  }
}

function requestHeaders(req: IncomingMessage, options: ForwardOptions, upstreamHost: string): Record<string, string | string[]> {
  const headers: Record<string, string | string[]> = {}
  const dropped = connectionTokens(req.headers.connection)
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || dropped.has(name) || name === 'host' || name === 'expect') continue
    headers[name] = value
  }
  const client = req.socket.remoteAddress ?? ''
  const forwardedFor = req.headers['x-forwarded-for']
  headers['x-forwarded-for'] = forwardedFor === undefined || forwardedFor === '' ? client : `${String(forwardedFor)}, ${client}`
  headers['x-forwarded-proto'] = options.protocol
  if (req.headers.host !== undefined) headers['x-forwarded-host'] = req.headers.host
  headers.host = options.preserveHost && req.headers.host !== undefined ? req.headers.host : upstreamHost
  return headers
}

/** Header names a `Connection` field lists: hop-by-hop for this message. */
function connectionTokens(value: string | string[] | undefined): Set<string> {
  if (value === undefined) return new Set()
  return new Set(String(value).split(',').map((token) => token.trim().toLowerCase()).filter((token) => token !== ''))
}

function isTimeout(error: unknown): boolean {
  return error instanceof errors.HeadersTimeoutError || error instanceof errors.ConnectTimeoutError || error instanceof errors.BodyTimeoutError
}

function flatten(headers: ReadonlyArray<[string, string]>): string[] {
  return headers.flat()
}
