/**
 * What is wrong with a Redis URL, checked before ioredis reads it: ioredis
 * takes a database path it cannot read as `SELECT NaN`, whose refusal comes
 * back as an error no call is waiting on (the process ends), and throws from
 * its connection on credentials that are not valid percent-encoding.
 */

/** ioredis options a URL's query may set that the store's connection must keep as it sets them. */
const LIMITER_SETTINGS = ['autoResendUnfulfilledCommands', 'enableOfflineQueue', 'maxRetriesPerRequest']

/** The problem with `url` as a Redis URL, phrased to follow its name ("url must be ..."); undefined when there is none. */
export function redisUrlProblem(url: unknown): string | undefined {
  if (typeof url !== 'string' || !/^rediss?:\/\//.test(url)) return 'must be a redis:// or rediss:// URL'
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return 'is not a valid URL (a port from 1 to 65535, a host without spaces)'
  }
  if (!/^\/?\d*$/.test(parsed.pathname)) return `must name a database by its number (redis://host:6379/0), not "${parsed.pathname.slice(1)}"`
  // ioredis takes its options from the query too (?db=2).
  const db = parsed.searchParams.get('db')
  if (db !== null && !/^\d+$/.test(db)) return `must name a database by its number (?db=0), not "${db}"`
  // ioredis takes those over the options the store gives: a limiter's connection must not re-send a decision, nor queue it unboundedly.
  const overriding = LIMITER_SETTINGS.filter((name) => parsed.searchParams.has(name))
  if (overriding.length > 0) return `must not set ${overriding.join(' or ')}: the store's connection keeps them as a limiter needs (a decision re-sent after a reconnect is charged twice); to set them otherwise, pass a client of your own`
  try {
    decodeURIComponent(parsed.username)
    decodeURIComponent(parsed.password)
  } catch {
    return 'has a user name or password that is not valid percent-encoding (write a % in it as %25)'
  }
  return undefined
}
