/**
 * The path rules are matched against. A limit on `/api/**` must hold for every
 * spelling of a path the application (or a proxy or file server behind it)
 * would serve as one under `/api`: `/public/../api/x`, `/public/%2e%2e/api/x`,
 * `//api/x`, `/./api/x`, `/api/%78` (Fastify, Spring, Go and nginx decode it
 * before routing), and the absolute form `GET http://host/api/x`.
 * Normalizing can only widen what a rule matches, never narrow it.
 */

/** RFC 3986 2.3: a percent-encoded unreserved character means the character itself (6.2.2.2). */
const ENCODED_UNRESERVED = /%(3[0-9]|4[1-9a-f]|5[0-9a]|6[1-9a-f]|7[0-9a]|2d|2e|5f|7e)/gi

/**
 * RFC 3986 6.2.2 normalization: percent-encoded unreserved characters decoded,
 * dot segments resolved, and empty segments dropped. Every other character,
 * `%2F` included, stays as sent, so the result means what the request meant
 * and the gateway can forward it.
 */
export function normalizePath(path: string): string {
  // Most paths have nothing to normalize (and a regular expression literal here would be a new object per call).
  if (!path.includes('//') && !path.includes('/.') && !path.includes('%')) return path
  const decoded = path.includes('%') ? path.replace(ENCODED_UNRESERVED, (encoded) => String.fromCharCode(parseInt(encoded.slice(1), 16))) : path
  const out: string[] = []
  for (const segment of decoded.split('/')) {
    if (segment === '' || segment === '.') continue
    if (segment === '..') out.pop()
    else out.push(segment)
  }
  return `/${out.join('/')}${path.endsWith('/') && out.length > 0 ? '/' : ''}`
}

/**
 * A request target (`/a/b?q`, or the absolute form `http://host/a/b?q`) to its
 * normalized path. A fragment ends the path as a query does: no client sends
 * one, but node's parser lets `GET /login#x` through, and Express, Fastify and
 * WHATWG URL route it as `/login`.
 */
export function requestPath(target: string): string {
  const end = pathEnd(target)
  let path = end === -1 ? target : target.slice(0, end)
  if (!path.startsWith('/')) {
    try {
      path = new URL(path).pathname
    } catch {
      path = `/${path}`
    }
  }
  return normalizePath(path)
}

/** Where a request target's path ends: its first `?` or `#`, or -1. */
function pathEnd(target: string): number {
  const query = target.indexOf('?')
  const fragment = target.indexOf('#')
  return fragment === -1 ? query : query === -1 ? fragment : Math.min(query, fragment)
}

/** A request target's query with its `?` (`''` when it has none), without a fragment. */
export function requestQuery(target: string): string {
  const end = pathEnd(target)
  if (end === -1 || target[end] === '#') return ''
  const fragment = target.indexOf('#', end)
  return fragment === -1 ? target.slice(end) : target.slice(end, fragment)
}

/**
 * The path a listener that reads the target with WHATWG URL (`new URL(req.url,
 * base)`, what node's documentation shows) would see, where it is another one
 * than requestPath's: a target starting with two slashes (or backslashes)
 * names a host there, so `//x/login` is `/login`. Undefined otherwise.
 */
export function pathAsUrlReads(target: string): string | undefined {
  if (!/^[/\\]{2}/.test(target)) return undefined
  try {
    return normalizePath(new URL(target, 'http://base.invalid').pathname)
  } catch {
    return undefined
  }
}

/**
 * The host a listener that reads the target with WHATWG URL (`new URL(req.url,
 * \`http://${req.headers.host}\`)`) would see: an absolute-form target's own
 * (`GET http://a.test/x`, which RFC 9112 3.2.2 has servers take over the Host
 * field), a `//a.test/x` target's, or the Host field as URL reads it
 * (`b.test@a.test`, `a.test/x`). Undefined for an origin-form target with a
 * plain host, which every reading agrees on.
 */
export function hostAsUrlReads(target: string, host: string | undefined): string | undefined {
  const originForm = target.startsWith('/') && target[1] !== '/' && target[1] !== '\\'
  if (originForm && (host === undefined || /^[\w.-]*(:\d*)?$/.test(host))) return undefined
  try {
    return new URL(target, `http://${host ?? 'localhost'}`).host
  } catch {
    return undefined
  }
}
