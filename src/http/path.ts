/**
 * The path rules are matched against. A limit on `/api/**` must hold for every
 * spelling of a path the application (or a proxy or file server behind it)
 * would serve as one under `/api`: `/public/../api/x`, `/public/%2e%2e/api/x`,
 * `//api/x`, `/./api/x`, and the absolute form `GET http://host/api/x`.
 * Normalizing can only widen what a rule matches, never narrow it.
 */

/** Dot segments (also percent-encoded) resolved, empty segments dropped; other characters untouched. */
export function normalizePath(path: string): string {
  if (!/\/\/|\/\.|%2e/i.test(path)) return path
  const out: string[] = []
  for (const segment of path.split('/')) {
    const plain = segment.replace(/%2e/gi, '.')
    if (segment === '' || plain === '.') continue
    if (plain === '..') out.pop()
    else out.push(segment)
  }
  return `/${out.join('/')}${path.endsWith('/') && out.length > 0 ? '/' : ''}`
}

/** A request target (`/a/b?q`, or the absolute form `http://host/a/b?q`) to its normalized path. */
export function requestPath(target: string): string {
  const query = target.indexOf('?')
  let path = query === -1 ? target : target.slice(0, query)
  if (!path.startsWith('/')) {
    try {
      path = new URL(path).pathname
    } catch {
      path = `/${path}`
    }
  }
  return normalizePath(path)
}
