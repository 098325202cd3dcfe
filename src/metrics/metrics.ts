/**
 * The gateway's Prometheus metrics (prom-client), in one registry of their own:
 * the decision metrics the middleware has too (by route here), and the
 * gateway's own. Labels stay bounded: routes, upstreams and policies come from
 * the config, outcomes and reasons from fixed sets; no key, path or client
 * ever becomes a label.
 */
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client'
import type { LimiterObserver } from '../limiter/limiter.ts'
import type { Decision } from '../core/types.ts'
import { TwoLabelCounter, TwoLabelCounts } from './counter.ts'
import { DecisionMetrics } from './decisions.ts'
import { LabelledHistogram } from './histogram.ts'
import type { DecisionOutcome } from './tally.ts'

export class GatewayMetrics {
  readonly registry = new Registry()
  private readonly decisions: DecisionMetrics<'route'>
  private readonly storeUp: Gauge
  private readonly upstreamFailures: Counter<'route' | 'failure'>
  private readonly upstreamRetries: Counter<'route' | 'upstream' | 'failure'>
  private readonly requestDuration: LabelledHistogram
  /** Whether requestDuration is labelled by route, or `*` for all (admin.durationByRoute). */
  private durationByRoute = true
  private readonly configReloads: Counter<'result'>
  private readonly configInfo: Gauge<'version'>
  private readonly tunnels: Gauge<'route'>
  private readonly upstreamHealthy: Gauge<'route' | 'upstream'>
  private readonly connectionsRefused: Counter<'cap'>
  private readonly logLinesDropped: Counter
  private readonly certificateExpiry: Gauge
  /** Reads how many client connections are open (the gateway's listener says, when scraped). */
  private openConnections: () => Promise<number> = () => Promise.resolve(0)
  /** Requests by route and status. */
  private readonly requestCounts = new TwoLabelCounts<number>(1)

  constructor() {
    const registers = [this.registry]
    collectDefaultMetrics({ register: this.registry, prefix: 'sluice_' })
    this.decisions = new DecisionMetrics(this.registry, 'route')
    this.storeUp = new Gauge({ name: 'sluice_store_up', help: '1 when the store answered the last health probe.', registers })
    new TwoLabelCounter('sluice_requests_total', 'Requests answered, by route and status code.', this.requestCounts, ['route', 'status'], [{ slot: 0 }], this.registry)
    this.upstreamFailures = new Counter({ name: 'sluice_upstream_failures_total', help: 'Requests the upstream could not answer, the client getting a 502 or 504 or a response cut short (unreachable, closed, invalid, timeout, broken).', labelNames: ['route', 'failure'], registers })
    this.upstreamRetries = new Counter({ name: 'sluice_upstream_retries_total', help: 'Requests sent again after an upstream failed them without answering (unreachable, closed), by the upstream that failed: failures the client did not see.', labelNames: ['route', 'upstream', 'failure'], registers })
    this.requestDuration = new LabelledHistogram(
      'sluice_request_duration_seconds',
      'Time from request to response end, by route.',
      'route',
      [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      this.registry,
    )
    this.configReloads = new Counter({ name: 'sluice_config_reloads_total', help: 'Config reloads by result (applied, refused, unchanged).', labelNames: ['result'], registers })
    this.configInfo = new Gauge({ name: 'sluice_config_info', help: 'The running config version (1 for the current one).', labelNames: ['version'], registers })
    this.tunnels = new Gauge({ name: 'sluice_tunnels_open', help: 'WebSocket connections joined to their upstream, open now.', labelNames: ['route'], registers })
    this.upstreamHealthy = new Gauge({ name: 'sluice_upstream_healthy', help: "1 while an upstream passes its route's health check, 0 while it fails it (routes with healthCheck only).", labelNames: ['route', 'upstream'], registers })
    this.connectionsRefused = new Counter({ name: 'sluice_connections_refused_total', help: 'Connections closed unanswered as they came, over server.connections: max (all clients) or perClient (one client).', labelNames: ['cap'], registers })
    this.certificateExpiry = new Gauge({ name: 'sluice_tls_certificate_expiry_timestamp_seconds', help: 'When the certificate the gateway serves expires (its notAfter), as a Unix time; absent without server.tls.', registers })
    this.logLinesDropped = new Counter({ name: 'sluice_log_lines_dropped_total', help: 'Log lines dropped because stdout took none while logging.bufferBytes of them waited (a stalled log reader).', registers })
    const openConnections = () => this.openConnections()
    new Gauge({
      name: 'sluice_connections_open',
      help: 'Client connections open now (kept alive, or carrying requests; the admin listener\'s are not counted).',
      registers,
      async collect() {
        this.set(await openConnections())
      },
    })
    this.storeUp.set(1)
  }

  /** Where sluice_connections_open is read from when scraped. */
  countConnections(read: () => Promise<number>): void {
    this.openConnections = read
  }

  connectionRefused(cap: 'max' | 'perClient'): void {
    this.connectionsRefused.inc({ cap })
  }

  logLineDropped(): void {
    this.logLinesDropped.inc()
  }

  /** When the served certificate ends (epoch ms), or undefined without one: the gauge is then absent. */
  servedCertificate(expiresAt: number | undefined): void {
    this.certificateExpiry.reset()
    if (expiresAt !== undefined) this.certificateExpiry.set(expiresAt / 1000)
  }

  /** What the limiters report that decisions do not carry. */
  get observer(): LimiterObserver {
    return this.decisions.observer
  }

  /** Refunds the store did not take, owed by every limiter of this gateway (a reloaded config's too). */
  get refundsOwed(): number {
    return this.decisions.refundsOwed
  }

  /** Counts one decision of `route`; says its outcome. */
  decision(route: string, decision: Decision, shadow: boolean): DecisionOutcome {
    return this.decisions.decision(route, decision, shadow)
  }

  request(route: string, status: number, seconds: number): void {
    ;(this.requestCounts.of(route, status)[0] as number)++
    this.requestDuration.observe(this.durationByRoute ? route : '*', seconds)
  }

  /**
   * Request durations by route, or for every route as one (`route="*"`): a
   * histogram is 16 series a route, and with thousands of routes in use most
   * of a scrape (5,000 routes: 6.3 MB against 0.8 MB without). Changed, the
   * series kept so far go: they would stop moving.
   */
  setDurationByRoute(byRoute: boolean): void {
    if (byRoute === this.durationByRoute) return
    this.durationByRoute = byRoute
    this.requestDuration.reset()
  }

  /** A WebSocket joined to its upstream; `closed` is to be called when it ends. */
  tunnelOpened(route: string): () => void {
    this.tunnels.inc({ route })
    return () => this.tunnels.dec({ route })
  }

  upstreamHealth(route: string, upstream: string, healthy: boolean): void {
    this.upstreamHealthy.set({ route, upstream }, healthy ? 1 : 0)
  }

  /** Drops every upstream's health series (a reload sets those of the routes it keeps again). */
  forgetUpstreamHealth(): void {
    this.upstreamHealthy.reset()
  }

  upstreamFailure(route: string, failure: string): void {
    this.upstreamFailures.inc({ route, failure })
  }

  upstreamRetry(route: string, upstream: string, failure: string): void {
    this.upstreamRetries.inc({ route, upstream, failure })
  }

  storeHealth(up: boolean): void {
    this.storeUp.set(up ? 1 : 0)
  }

  configLoaded(version: string, previous: string | undefined): void {
    if (previous !== undefined) {
      this.configInfo.remove({ version: previous })
      this.configReloads.inc({ result: 'applied' })
    }
    this.configInfo.set({ version }, 1)
  }

  configRefused(): void {
    this.configReloads.inc({ result: 'refused' })
  }

  configUnchanged(): void {
    this.configReloads.inc({ result: 'unchanged' })
  }
}
