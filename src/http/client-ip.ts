/**
 * The client's address, as a rate-limit key. The socket's peer is the client
 * unless it is a configured trusted proxy: only then is the header those
 * proxies write (`X-Forwarded-For`, or `Forwarded`) believed, walked from the
 * right, and the first address that is not a trusted proxy is the client. A
 * header from an untrusted peer changes nothing, so a client cannot pick its
 * own key.
 */
import ipaddr from 'ipaddr.js'
import { ArgumentError } from '../core/errors.ts'
import { checkChoice, checkOptions } from '../core/options.ts'

type Address = ipaddr.IPv4 | ipaddr.IPv6

export interface ClientIpOptions {
  /**
   * Proxies in front of this server: CIDRs or addresses (`'10.0.0.0/8'`,
   * `'::1'`), or the number of proxy hops. Default: none, the socket peer is the client.
   */
  trustProxy?: readonly string[] | number | false
  /** IPv6 clients are grouped by this prefix, so one host cannot rotate through its own subnet. Default 56. */
  ipv6Prefix?: number
  /**
   * The header the trusted proxies write: `x-forwarded-for` (nginx, HAProxy,
   * Envoy, cloud load balancers) or `forwarded` (RFC 7239). Only that one is
   * read: a proxy passes the other on as the client sent it. Default `x-forwarded-for`.
   */
  header?: 'x-forwarded-for' | 'forwarded'
}

export interface ResolvedClientIp {
  /** `ip:203.0.113.7`, or `ip:2001:db8:ab::/56`; undefined when no address can be trusted. */
  key: string | undefined
  /** True when forwarding headers were present but ignored (no trusted proxy): worth a warning. */
  ignoredForwarding: boolean
}

export type HeaderReader = (name: string) => string | undefined

/** Compiles the options once; the returned function resolves one request. */
const CLIENT_IP_OPTIONS = new Set(['trustProxy', 'ipv6Prefix', 'header'])

export function clientIpResolver(options: ClientIpOptions = {}): (remoteAddress: string | undefined, header: HeaderReader) => ResolvedClientIp {
  checkOptions('clientIp', 'a clientIp option', options, CLIENT_IP_OPTIONS)
  const prefix = options.ipv6Prefix ?? 56
  if (!Number.isInteger(prefix) || prefix < 1 || prefix > 128) {
    throw new ArgumentError('ipv6Prefix', options.ipv6Prefix, 'must be an integer from 1 to 128')
  }
  checkChoice('header', options.header ?? 'x-forwarded-for', ['x-forwarded-for', 'forwarded'])
  const { trustsAny } = proxyTrust(options.trustProxy)
  const clientBehind = forwardingWalk(options)

  const peerKey = perPeer((remoteAddress) => {
    const peer = parse(remoteAddress)
    return peer === undefined ? undefined : keyOf(peer, prefix)
  })

  return (remoteAddress, header) => {
    if (remoteAddress === undefined) return { key: undefined, ignoredForwarding: false }
    const hasForwarding = header('x-forwarded-for') !== undefined || header('forwarded') !== undefined
    if (!hasForwarding) return { key: peerKey(remoteAddress), ignoredForwarding: false }
    if (!trustsAny) return { key: peerKey(remoteAddress), ignoredForwarding: true }
    const client = clientBehind(remoteAddress, header)
    return { key: client === undefined ? undefined : keyOf(client, prefix), ignoredForwarding: false }
  }
}

/** The walk of clientIpResolver, from the socket's peer through the trusted proxies' header, to the client's address. */
function forwardingWalk(options: ClientIpOptions): (remoteAddress: string | undefined, header: HeaderReader) => Address | undefined {
  const forwardingHeader = options.header ?? 'x-forwarded-for'
  // Entries are read as addresses only as far as the walk goes: a header can hold thousands a client wrote.
  const forwardedEntries = forwardingHeader === 'forwarded'
    ? (header: HeaderReader) => entriesOf(header('forwarded'))
    : (header: HeaderReader) => entriesOf(header('x-forwarded-for'))
  const addressOf = forwardingHeader === 'forwarded' ? forwardedFor : parse
  const { trusted, hops } = proxyTrust(options.trustProxy)
  return (remoteAddress, header) => {
    const peer = parse(remoteAddress)
    if (peer === undefined) return undefined
    // The chain as the last proxy saw it: the forwarded entries, then the peer.
    const entries = forwardedEntries(header)
    let client: Address = peer
    if (entries.length > 0 && hops > 0) {
      client = addressOf(entries[Math.max(0, entries.length - hops)]) ?? peer
    } else if (entries.length > 0 && trusted(peer)) {
      for (let i = entries.length - 1; i >= 0; i--) {
        const address = addressOf(entries[i])
        if (address === undefined) break // unparseable: stop at the last address a trusted proxy vouched for
        client = address
        if (!trusted(address)) break
      }
    }
    return client
  }
}

/**
 * The client's address as clientIpResolver finds it, written out
 * (`203.0.113.7`, `2001:db8::1`; IPv4-mapped IPv6 as IPv4), not grouped into
 * a network: what a proxy tells its upstream in `X-Real-IP`. Undefined when
 * the peer is no address.
 */
export function clientAddressResolver(options: ClientIpOptions = {}): (remoteAddress: string | undefined, header: HeaderReader) => string | undefined {
  const walk = forwardingWalk(options)
  const { trustsAny } = proxyTrust(options.trustProxy)
  const forwardingHeader = options.header ?? 'x-forwarded-for'
  const peerAddress = perPeer((remoteAddress) => parse(remoteAddress)?.toString())
  return (remoteAddress, header) => {
    if (remoteAddress === undefined) return undefined
    return trustsAny && header(forwardingHeader) !== undefined ? walk(remoteAddress, header)?.toString() : peerAddress(remoteAddress)
  }
}

/**
 * `compute`, remembered per socket peer: peers repeat (one per connection),
 * and most requests are answered from the peer alone. The map is cleared when
 * it fills up.
 */
function perPeer<T>(compute: (remoteAddress: string) => T): (remoteAddress: string) => T | undefined {
  const known = new Map<string, T>()
  return (remoteAddress) => {
    let value = known.get(remoteAddress)
    if (value === undefined && !known.has(remoteAddress)) {
      value = compute(remoteAddress)
      if (known.size >= 10_000) known.clear()
      known.set(remoteAddress, value)
    }
    return value
  }
}

/**
 * Which peers are trusted proxies: `trusted`, those in the CIDRs; `isProxy`,
 * a socket peer that is one (with a hop count, every peer is).
 */
function proxyTrust(trust: ClientIpOptions['trustProxy'] = false): { trusted: (address: Address) => boolean; hops: number; trustsAny: boolean; isProxy: (peer: Address) => boolean } {
  if (typeof trust === 'number') {
    if (!Number.isInteger(trust) || trust < 0) throw new ArgumentError('trustProxy', trust, 'must be a hop count (integer >= 0) or a list of CIDRs')
    return { trusted: () => false, hops: trust, trustsAny: trust > 0, isProxy: () => trust > 0 }
  }
  if (Array.isArray(trust)) {
    const ranges = trust.map((cidr) => parseRange(cidr))
    const trusted = (address: Address) => ranges.some(([range, bits]) => address.kind() === range.kind() && address.match(range, bits))
    return { trusted, hops: 0, trustsAny: ranges.length > 0, isProxy: trusted }
  }
  if (trust !== false) throw new ArgumentError('trustProxy', trust, 'must be false, a hop count, or a list of CIDRs')
  return { trusted: () => false, hops: 0, trustsAny: false, isProxy: () => false }
}

/**
 * The client a connection comes from, as clientIpResolver keys it from the
 * socket's peer (`ip:203.0.113.7`, an IPv6 peer by its network): undefined
 * for a peer that is a trusted proxy, whose connections carry many clients'
 * requests (with a hop count, every peer is one), or that is no address.
 */
export function connectionClient(options: ClientIpOptions = {}): (remoteAddress: string | undefined) => string | undefined {
  const prefix = options.ipv6Prefix ?? 56
  const { isProxy } = proxyTrust(options.trustProxy)
  return (remoteAddress) => {
    const peer = parse(remoteAddress)
    return peer === undefined || isProxy(peer) ? undefined : keyOf(peer, prefix)
  }
}

/** Whether the socket's peer is a trusted proxy (with a hop count, every peer is one), whose forwarding headers say what the client reached it by. */
export function trustedProxyPeer(options: ClientIpOptions = {}): (remoteAddress: string | undefined) => boolean {
  const { trustsAny, isProxy } = proxyTrust(options.trustProxy)
  if (!trustsAny) return () => false
  const isTrusted = perPeer((remoteAddress) => {
    const peer = parse(remoteAddress)
    return peer !== undefined && isProxy(peer)
  })
  return (remoteAddress) => remoteAddress !== undefined && isTrusted(remoteAddress) === true
}

/** `ip:<address>`; IPv4-mapped IPv6 as IPv4; IPv6 as its /prefix network. */
function keyOf(address: Address, prefix: number): string {
  if (address.kind() === 'ipv4') return `ip:${address.toString()}`
  const network = ipaddr.IPv6.networkAddressFromCIDR(`${address.toString()}/${prefix}`)
  return `ip:${network.toString()}/${prefix}`
}

function parse(raw: string | undefined): Address | undefined {
  if (raw === undefined) return undefined
  let text = raw.trim()
  if (text.startsWith('"') && text.endsWith('"')) text = text.slice(1, -1)
  // [v6]:port, or v4:port
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(text)
  if (bracketed) text = bracketed[1] as string
  else if (/^\d+\.\d+\.\d+\.\d+:\d+$/.test(text)) text = text.slice(0, text.lastIndexOf(':'))
  const zone = text.indexOf('%')
  if (zone !== -1) text = text.slice(0, zone)
  if (!ipaddr.isValid(text)) return undefined
  const address = ipaddr.parse(text)
  if (address.kind() === 'ipv6' && (address as ipaddr.IPv6).isIPv4MappedAddress()) return (address as ipaddr.IPv6).toIPv4Address()
  return address
}

/** A forwarding header's comma-separated entries, left to right. */
function entriesOf(value: string | undefined): string[] {
  return value === undefined || value === '' ? [] : value.split(',')
}

/** The address of an RFC 7239 `Forwarded` element's `for=`; undefined when it has none that is an address, so the walk stops there. */
function forwardedFor(element: string | undefined): Address | undefined {
  const pair = element?.split(';').map((p) => p.trim()).find((p) => p.toLowerCase().startsWith('for='))
  return pair === undefined ? undefined : parse(pair.slice(4))
}

/**
 * A warning for a trustProxy list that trusts every IPv4 or every IPv6
 * address (`0.0.0.0/0`, `::/0`), if it does. With every address a proxy, the
 * walk ends at the left-most X-Forwarded-For entry, the one the client wrote:
 * each request can name a key of its own.
 */
export function everyAddressWarning(trustProxy: ClientIpOptions['trustProxy'], where: string): string | undefined {
  const every = Array.isArray(trustProxy) ? trustProxy.map((cidr) => ({ cidr, range: parseRange(cidr) })).find(({ range }) => range[1] === 0) : undefined
  if (every === undefined) return undefined
  return `${where} trusts ${every.cidr}, every ${every.range[0].kind() === 'ipv4' ? 'IPv4' : 'IPv6'} address, as a proxy: the client is then the left-most X-Forwarded-For entry, which the client writes, so any client can take a fresh quota per request. List your proxies' addresses, or give the number of proxies in front (a hop count) if their addresses are not known.`
}

function parseRange(cidr: string): [Address, number] {
  let range: [Address, number]
  try {
    if (cidr.includes('/')) {
      range = ipaddr.parseCIDR(cidr)
    } else {
      const address = ipaddr.parse(cidr)
      range = [address, address.kind() === 'ipv4' ? 32 : 128]
    }
  } catch {
    throw new ArgumentError('trustProxy', cidr, 'must hold addresses or CIDRs such as 10.0.0.0/8 or ::1')
  }
  // Peers are compared as IPv4 once unmapped, so a range written as a dual-stack socket shows them
  // (::ffff:10.0.0.5, ::ffff:10.0.0.0/104) is the IPv4 range it names.
  const [address, bits] = range
  if (address.kind() === 'ipv6' && bits >= 96 && (address as ipaddr.IPv6).isIPv4MappedAddress()) {
    return [(address as ipaddr.IPv6).toIPv4Address(), bits - 96]
  }
  return range
}

/** Whether the middleware keys some request by the client IP without a trusted proxy named: no key of its own, at the top or on every rule. */
function readsClientIp(options: { clientIp?: ClientIpOptions; key?: unknown; rules?: ReadonlyArray<{ key?: unknown }> }): boolean {
  if (options.clientIp?.trustProxy !== undefined || options.key !== undefined) return false
  return !Array.isArray(options.rules) || options.rules.some((rule) => rule?.key === undefined)
}

/**
 * An adapter's check, made once at the first request (where the app is
 * known; the options are given before it is), that the app trusts no proxy
 * sluice does not: `read` gives the app's setting from that request, and any
 * advice goes to `warn`. No check where no rule keys by the client address.
 */
export function proxyTrustOnce<Request>(
  options: Parameters<typeof readsClientIp>[0],
  app: string,
  settingName: string | ((setting: unknown) => string),
  read: (request: Request) => unknown,
  warn: (message: string) => void,
): (request: Request) => void {
  let checked = !readsClientIp(options)
  return (request) => {
    if (checked) return
    checked = true
    const setting = read(request)
    const advice = proxyTrustAdvice(app, typeof settingName === 'string' ? settingName : settingName(setting), setting)
    if (advice !== undefined) warn(advice)
  }
}

/** A trust setting known to be set, whose value cannot be read (Fastify's `trustProxy`). */
export const UNREADABLE = Symbol('unreadable')

/** proxy-addr's names for ranges (in Express's `trust proxy`), as CIDRs. */
const NAMED_RANGES: Readonly<Record<string, readonly string[]>> = {
  loopback: ['127.0.0.0/8', '::1/128'],
  linklocal: ['169.254.0.0/16', 'fe80::/10'],
  uniquelocal: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', 'fc00::/7'],
}

/**
 * For a framework app that trusts a proxy while sluice trusts none (the
 * peers' most reported trap, the other way round): what that means, and the
 * clientIp option that says the same. `setting` is the app's (Express's
 * `'trust proxy'`; Koa's hop count, or true for `app.proxy` alone; UNREADABLE
 * for Fastify's); undefined when it trusts no proxy.
 */
function proxyTrustAdvice(app: string, settingName: string, setting: unknown): string | undefined {
  if (setting === undefined || setting === null || setting === false || setting === 0) return undefined
  let same: string
  if (setting === UNREADABLE) same = `clientIp: { trustProxy } with the proxies' addresses, or their number, as the ${settingName} given to it`
  else if (typeof setting === 'number') same = `clientIp: { trustProxy: ${setting} }`
  else if (typeof setting === 'string' || Array.isArray(setting)) {
    const entries = (Array.isArray(setting) ? setting : setting.split(',')).map((entry) => String(entry).trim()).filter((entry) => entry !== '')
    same = `clientIp: { trustProxy: ${JSON.stringify(entries.flatMap((entry) => NAMED_RANGES[entry] ?? [entry]))} }`
  } else same = `clientIp: { trustProxy } with the proxies' addresses, or their number (${setting === true ? 'true trusts every address, so any client could name its own' : 'a function of yours cannot be read'})`
  const shown = setting === UNREADABLE ? 'set' : typeof setting === 'function' ? 'a function' : JSON.stringify(setting)
  return `sluice: this ${app} trusts a proxy (${settingName} is ${shown}), but sluice reads the client address by its own clientIp option, which trusts none: every client behind the proxy shares the proxy's quota. Give sluice the same: ${same}`
}
