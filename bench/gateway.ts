/**
 * Gateway benchmark (not a test): requests/s and latency through the sluice
 * gateway, directly to the upstream, and through nginx with `limit_req` as a
 * reverse proxy, in one run, on the same upstream (an nginx that answers
 * `200 ok` itself, so the upstream costs little and the proxies are what is
 * measured). Both proxies: one worker / one process, keep-alive to the
 * upstream, access logs off, a per-client-IP limit high enough never to bind
 * (so every request pays for a decision and none is refused).
 *
 * A fourth row, the least a Node proxy does (bench/bare-proxy.ts), separates
 * sluice's own cost from Node's; a fifth keys the same limit by a verified
 * JWT (HS256, one token for every request, as one client's), what verifying
 * bearer tokens adds. Last, gateways of 20 and 2,000 routes show
 * what the number of routes costs a request, and one of 5,000 what a reload
 * and a read of /metrics or /status cost the requests it is serving.
 *
 * Peak: wrk, 1 thread, 64 connections, the median of PEAK_RUNS runs taken
 * in rounds over the targets. Then p99 at half of each proxy's own
 * peak rate: wrk again, each connection waiting a random (exponential) time
 * before each request, so arrivals are spread over time as independent
 * clients' are. (autocannon's `overallRate` is no good here: each connection
 * sends its quota for the second at full speed and then idles, so it measures
 * bursts at the peak rate; and it pads its latencies for coordinated omission
 * as if every connection sent one request per millisecond.) Each proxy's p99
 * is the median of HALF_RUNS runs after one that calibrates the delay.
 *
 *   npm run bench:gateway              (about ten minutes; needs Debian's nginx and wrk)
 *   BENCH_SECONDS=5 npm run bench:gateway
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { startGateway } from '../test/support/gateway.ts'
import { freePort } from '../test/support/redis.ts'
import { SignJWT } from 'jose'
import { emit } from './report.ts'

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8)
const CONNECTIONS = 64
/** Requests per second per client that neither proxy reaches on this machine. */
const RATE = 1_000_000
const HALF_RUNS = 3
const PEAK_RUNS = 3
const LABELS: Record<string, string> = { direct: 'direct to the upstream', nginx: 'nginx limit_req proxy', bare: 'bare Node proxy (no limit)', sluice: 'sluice gateway (memory)', 'sluice-jwt': 'sluice gateway, JWT identity' }
/** The JWT identity row's HS256 secret, and the one token its requests carry (as a client's requests do). */
const JWT_SECRET = 'a-shared-secret-of-32-bytes-or-more!'

for (const tool of ['nginx', 'wrk']) {
  if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) {
    console.error(`bench:gateway needs ${tool}: apt-get install -y nginx wrk`)
    process.exit(1)
  }
}

const dir = mkdtempSync(join(tmpdir(), 'sluice-bench-gateway-'))
const children: ChildProcess[] = []

/** An nginx of its own (one worker, no daemon) with `server` blocks inside `http`. */
async function startNginx(name: string, servers: string, ports: number[]): Promise<void> {
  const conf = join(dir, `${name}.conf`)
  writeFileSync(conf, `
${process.getuid?.() === 0 ? 'user root;' : ''}
worker_processes 1;
pid ${dir}/${name}.pid;
error_log ${dir}/${name}-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/${name}-body;
  proxy_temp_path ${dir}/${name}-proxy;
  fastcgi_temp_path ${dir}/${name}-fastcgi;
  uwsgi_temp_path ${dir}/${name}-uwsgi;
  scgi_temp_path ${dir}/${name}-scgi;
  keepalive_requests 1000000;
  ${servers}
}
`)
  const child = spawn('nginx', ['-p', dir, '-c', conf, '-g', 'daemon off;'], { stdio: ['ignore', 'inherit', 'inherit'] })
  children.push(child)
  for (let i = 0; i < 100; i++) {
    const up = await Promise.all(ports.map((port) => fetch(`http://127.0.0.1:${port}/`).then(() => true, () => false)))
    if (up.every(Boolean)) return
    await sleep(50)
  }
  throw new Error(`nginx ${name} did not start`)
}

interface Peak { rps: number; p50: number; p99: number; non2xx: number; errors: number }

function wrk(url: string, args: string[] = [], env: Record<string, string> = {}): Peak {
  const run = spawnSync('wrk', ['-t1', `-c${CONNECTIONS}`, `-d${SECONDS}s`, '--latency', ...args, url], { encoding: 'utf8', env: { ...process.env, ...env } })
  if (run.status !== 0) throw new Error(`wrk ${url} failed: ${run.stderr}${run.stdout}`)
  const out = run.stdout
  const ms = (label: string) => {
    const match = new RegExp(`${label}\\s+([\\d.]+)(us|ms|s)`).exec(out)
    if (match === null) return NaN
    const value = Number(match[1])
    return match[2] === 'us' ? value / 1000 : match[2] === 's' ? value * 1000 : value
  }
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0)
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out)
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? NaN),
    p50: ms(' 50%'),
    p99: ms(' 99%'),
    non2xx,
    errors: errors === null ? 0 : errors.slice(1).reduce((sum, n) => sum + Number(n), 0),
  }
}

/**
 * Delays every connection's next request by an exponential random time of
 * mean MEAN_MS: 64 connections then arrive as independent clients do.
 */
const PACED_SCRIPT = `
local mean = tonumber(os.getenv("MEAN_MS"))
math.randomseed(os.time())
function delay() return math.floor(-mean * math.log(1 - math.random()) + 0.5) end
`
const pacedScript = join(dir, 'paced.lua')
writeFileSync(pacedScript, PACED_SCRIPT)

/**
 * Latency at `rate` requests/s, spread as independent clients send them: the
 * median p99 of HALF_RUNS runs. A connection's cycle is its delay plus the
 * response's latency, so a first run, not counted, finds the latency to
 * subtract, and each run corrects the delay by the rate the last one achieved.
 * (The first run is also when a Node proxy opens its upstream connections
 * again, their keep-alive lapsed while the other targets were measured: the
 * Node ones gave 2-6x their later p99 in it, the gateway about half that with
 * a keep-alive longer than the idle time.)
 */
function atRate(url: string, rate: number): Peak {
  const cycleMs = (1000 * CONNECTIONS) / rate
  let delayMs = cycleMs
  const runs: Peak[] = []
  for (let i = 0; i <= HALF_RUNS; i++) {
    const run = wrk(url, ['-s', pacedScript], { MEAN_MS: String(delayMs) })
    if (i > 0) runs.push(run)
    console.log(`  ${url} at ${rate.toFixed(0)}/s, ${i === 0 ? 'calibration' : `run ${i}`}: mean delay ${delayMs.toFixed(2)} ms, ${run.rps.toFixed(0)}/s, p99 ${run.p99.toFixed(2)} ms`)
    const latencyMs = (1000 * CONNECTIONS) / run.rps - delayMs
    delayMs = Math.max(0, cycleMs - latencyMs)
  }
  runs.sort((a, b) => a.p99 - b.p99)
  return runs[Math.floor(runs.length / 2)] as Peak
}

/**
 * What the number of routes costs a request: gateways of a few and of
 * thousands of routes under one prefix (`/api/svcN/**`, each with a limit of
 * its own), each measured on a request for its first route, its last, and a
 * path no route takes (a 404, which anyone can send).
 */
async function routeScaling(upstreamPort: number): Promise<void> {
  const rows: Array<Array<string | number>> = []
  for (const count of ROUTE_COUNTS) {
    const routes = Array.from({ length: count }, (_, i) => `
  - name: svc${i}
    match: { path: /api/svc${i}/** }
    upstream: http://127.0.0.1:${upstreamPort}
    limits:
      - { policies: { algorithm: fixed-window, name: svc${i}, limit: ${RATE}, windowMs: 1000 } }`)
    const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
logging: { level: info, access: false }
routes:${routes.join('')}
`)
    try {
      const rates = [`/api/svc0/x`, `/api/svc${count - 1}/x`, '/api/none/x'].map((path) => {
        wrk(`${gateway.url}${path}`, ['-d2s']) // warm-up, not counted
        return wrk(`${gateway.url}${path}`).rps
      })
      const [first, last, unmatched] = rates as [number, number, number]
      console.log(`${count} routes: first ${first.toFixed(0)}/s, last ${last.toFixed(0)}/s, unmatched (404) ${unmatched.toFixed(0)}/s`)
      rows.push([count, Math.round(first), Math.round(last), Math.round(unmatched), `${((last / first) * 100).toFixed(0)}%`])
    } finally {
      await gateway.stop()
    }
  }
  emit({
    bench: 'gateway',
    title: `Gateway routes: req/s through gateways of ${ROUTE_COUNTS.join(' and ')} routes (/api/svcN/**, each with a limit), wrk 1 thread x ${CONNECTIONS} connections x ${SECONDS} s`,
    columns: ['routes', 'first route', 'last route', 'no route (404)', 'last / first'],
    rows,
    notes: ['routes are looked up by host and literal path segments, not tried in turn: the last route should cost about what the first does'],
  })
}

const ROUTE_COUNTS = [20, 2000]

/**
 * How long `during` holds the gateway's thread: one request after another on
 * `url` while it runs, and for a second after; the longest wait between two
 * answers once it started, against the usual wait before it.
 */
async function longestWait(url: string, during: () => Promise<void>): Promise<{ tookMs: number; longestMs: number; usualMs: number }> {
  const answered: number[] = []
  const deadline = performance.now() + 60_000
  let finished = false
  const loop = (async () => {
    // A bounded loop: until `during` is over and a second has passed, at most a minute.
    let after = Infinity
    while (performance.now() < Math.min(deadline, after)) {
      await (await fetch(url)).arrayBuffer()
      answered.push(performance.now())
      if (finished && after === Infinity) after = performance.now() + 1000
    }
  })()
  await sleep(1000)
  const started = performance.now()
  await during()
  const tookMs = performance.now() - started
  finished = true
  await loop
  const gaps = answered.slice(1).map((at, i) => [at, at - (answered[i] as number)] as const)
  const before = gaps.filter(([at]) => at < started).map(([, gap]) => gap).sort((a, b) => a - b)
  return { tookMs, longestMs: Math.max(...gaps.filter(([at]) => at >= started).map(([, gap]) => gap)), usualMs: before[Math.floor(before.length / 2)] ?? NaN }
}

/**
 * What a reload and a read of `/metrics` or `/status` cost the requests being served, on
 * a gateway of STALL_ROUTES routes (each with a limit), one request after
 * another on its last route.
 * - Reload: the file changes and SIGHUP reloads it. The file is read and
 *   checked on a worker thread; what is left is building the new routes and
 *   limiters from it.
 * - Scrape: every route has been used, so the request-duration histogram has
 *   16 series a route; the text is written a slice at a time, and what is
 *   left is reading each metric's series.
 * - /status: every route, and the watched keys' quota under every policy,
 *   written a slice at a time too.
 */
async function stalls(upstreamPort: number): Promise<void> {
  const yaml = (limit: number) => `
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0, watch: [ip:127.0.0.1, ip:192.0.2.1] }
logging: { level: info, access: false }
routes:${Array.from({ length: STALL_ROUTES }, (_, i) => `
  - name: svc${i}
    match: { path: /api/svc${i}/** }
    upstream: http://127.0.0.1:${upstreamPort}
    limits:
      - { policies: { algorithm: fixed-window, name: svc${i}, limit: ${limit}, windowMs: 1000 } }`).join('')}
`
  const gateway = await startGateway(yaml(RATE))
  try {
    const url = `${gateway.url}/api/svc${STALL_ROUTES - 1}/x`
    const reload = await longestWait(url, async () => {
      gateway.writeConfig(yaml(RATE - 1))
      gateway.child.kill('SIGHUP')
      await gateway.waitForLog((line) => line.msg === 'config reloaded', 60_000)
    })
    console.log(`reload of ${STALL_ROUTES} routes: ${reload.tookMs.toFixed(0)} ms from SIGHUP to applied; longest wait between answers meanwhile ${reload.longestMs.toFixed(0)} ms (usually ${reload.usualMs.toFixed(2)} ms)`)
    emit({
      bench: 'gateway',
      title: `Gateway reload: one request after another on the last of ${STALL_ROUTES} routes (each with a limit) while SIGHUP reloads a changed file`,
      columns: ['routes', 'SIGHUP to applied', 'longest wait between answers', 'usual wait'],
      rows: [[STALL_ROUTES, `${reload.tookMs.toFixed(0)} ms`, `${reload.longestMs.toFixed(0)} ms`, `${reload.usualMs.toFixed(2)} ms`]],
      notes: ['the file is read and checked on a worker thread; the longest wait is what building the new routes and limiters holds the gateway for'],
    })

    for (let i = 0; i < STALL_ROUTES; i += 50) {
      await Promise.all(Array.from({ length: Math.min(50, STALL_ROUTES - i) }, (_, j) => fetch(`${gateway.url}/api/svc${i + j}/x`).then((res) => res.arrayBuffer())))
    }
    const notes = {
      '/metrics': 'the text is written a slice at a time, letting requests in between; the longest wait is mostly reading the request-duration histogram (16 series a route; admin.durationByRoute: false keeps one)',
      '/status': 'every route, and two watched keys\' quota under each of the 5,000 policies, read without charging; built and written a slice at a time, as /metrics is',
    }
    for (const [path, note] of Object.entries(notes)) {
      const rows: Array<Array<string | number>> = []
      for (let round = 1; round <= SCRAPES; round++) {
        let bytes = 0
        const read = await longestWait(url, async () => {
          bytes = (await (await fetch(`${gateway.adminUrl}${path}`)).arrayBuffer()).byteLength
        })
        console.log(`${path} read ${round} with ${STALL_ROUTES} routes in use: ${(bytes / 1e6).toFixed(1)} MB in ${read.tookMs.toFixed(0)} ms; longest wait between answers meanwhile ${read.longestMs.toFixed(0)} ms (usually ${read.usualMs.toFixed(2)} ms)`)
        rows.push([round, `${(bytes / 1e6).toFixed(1)} MB`, `${read.tookMs.toFixed(0)} ms`, `${read.longestMs.toFixed(0)} ms`, `${read.usualMs.toFixed(2)} ms`])
      }
      emit({
        bench: 'gateway',
        title: `Gateway ${path}: one request after another on the last of ${STALL_ROUTES} routes, every one of them used, while ${path} is read`,
        columns: ['read', 'size', 'read in', 'longest wait between answers', 'usual wait'],
        rows,
        notes: [note],
      })
    }
  } finally {
    await gateway.stop()
  }
}

const STALL_ROUTES = 5000
const SCRAPES = 3

try {
  const [upstreamPort, nginxPort] = [await freePort(), await freePort()]
  await startNginx('upstream', `server { listen 127.0.0.1:${upstreamPort}; location / { return 200 "ok\\n"; } }`, [upstreamPort])
  await startNginx('proxy', `
  limit_req_zone $binary_remote_addr zone=perip:10m rate=${RATE}r/s;
  limit_req_status 429;
  upstream backend { server 127.0.0.1:${upstreamPort}; keepalive 64; }
  server {
    listen 127.0.0.1:${nginxPort};
    location / {
      limit_req zone=perip burst=${RATE} nodelay;
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }
  }`, [nginxPort])
  /** One limit that never binds, named `limit`, keyed as `identity` says (by IP when it says nothing). */
  const limitedGateway = (limit: string, identity = '') => startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
logging: { level: info, access: false }
${identity}
limits:
  - name: ${limit}
    policies: { algorithm: token-bucket, name: ${limit}, capacity: ${RATE}, refillTokens: ${RATE}, refillIntervalMs: 1000 }
routes:
  - name: all
    upstream: http://127.0.0.1:${upstreamPort}
`)
  const gateway = await limitedGateway('per-ip')
  // The same limit keyed by a verified JWT's sub, and by nothing else: what verifying bearer tokens adds to a request.
  const jwtGateway = await limitedGateway('per-user', `identity:
  jwt: { algorithms: [HS256], secret: "${JWT_SECRET}" }
  order: [jwt]
  emptyKey: forbid`)
  const token = await new SignJWT({ sub: 'bench-user' }).setProtectedHeader({ alg: 'HS256' }).setExpirationTime('2h').sign(new TextEncoder().encode(JWT_SECRET))
  try {
    const bare = spawn(process.execPath, ['--import', 'tsx', new URL('./bare-proxy.ts', import.meta.url).pathname, String(upstreamPort)], { stdio: ['ignore', 'pipe', 'inherit'] })
    children.push(bare)
    const barePort = await new Promise<number>((resolve) => bare.stdout?.once('data', (chunk: Buffer) => resolve(Number(chunk.toString().trim()))))
    const targets = {
      direct: `http://127.0.0.1:${upstreamPort}/`,
      nginx: `http://127.0.0.1:${nginxPort}/`,
      bare: `http://127.0.0.1:${barePort}/`,
      sluice: `${gateway.url}/`,
      'sluice-jwt': `${jwtGateway.url}/`,
    }
    const targetArgs: Record<string, string[]> = { 'sluice-jwt': ['-H', `Authorization: Bearer ${token}`] }
    console.log(`sluice gateway benchmark: node ${process.version}, ${spawnSync('nginx', ['-v'], { encoding: 'utf8' }).stderr.trim()}, wrk 1 thread x ${CONNECTIONS} connections x ${SECONDS} s\n`)
    for (const [name, url] of Object.entries(targets)) wrk(url, targetArgs[name]) // warm-up (JIT, pools), not counted
    // Rounds of every target in turn, each target's peak its median run: a stall of the host (or of one
    // proxy, once nginx's p99 went to 10 ms for one run and sluice read 102% of it) weighs on one round, not on one target.
    const runs: Record<string, Peak[]> = {}
    for (let round = 0; round < PEAK_RUNS; round++) {
      for (const [name, url] of Object.entries(targets)) (runs[name] ??= []).push(wrk(url, targetArgs[name]))
    }
    const peaks: Record<string, Peak> = {}
    for (const [name, peakRuns] of Object.entries(runs)) peaks[name] = [...peakRuns].sort((a, b) => a.rps - b.rps)[Math.floor(peakRuns.length / 2)] as Peak
    // The token is the only identity (a request without one gets 403): a row of 200s is a row of verified tokens.
    if ((runs['sluice-jwt'] ?? []).some((run) => run.non2xx > 0)) throw new Error('the JWT identity row had requests refused: the token did not verify (403), or the limit was reached')
    const half: Record<string, Peak> = {}
    for (const name of ['nginx', 'bare', 'sluice'] as const) half[name] = atRate(targets[name], (peaks[name] as Peak).rps / 2)

    console.log(`${'target'.padEnd(28)}${'req/s'.padStart(10)}${'p50 ms'.padStart(9)}${'p99 ms'.padStart(9)}${'half-peak p99 ms'.padStart(18)}`)
    for (const [name, peak] of Object.entries(peaks)) {
      const label = LABELS[name] ?? name
      const h = half[name]
      console.log(`${label.padEnd(28)}${peak.rps.toFixed(0).padStart(10)}${peak.p50.toFixed(2).padStart(9)}${peak.p99.toFixed(2).padStart(9)}${(h === undefined ? '' : `${h.p99.toFixed(2)} @${h.rps.toFixed(0)}/s`).padStart(18)}${peak.errors + peak.non2xx > 0 ? `  (${peak.errors} socket errors, ${peak.non2xx} non-2xx)` : ''}`)
    }
    const ratio = (peaks.sluice as Peak).rps / (peaks.nginx as Peak).rps
    const p99 = half.sluice?.p99 ?? NaN
    const notes = [
      `sluice / nginx throughput: ${(ratio * 100).toFixed(0)}%   (target: at least 60%) ${ratio >= 0.6 ? 'met' : 'MISSED'}`,
      `sluice p99 at half its peak rate: ${p99.toFixed(2)} ms   (target: under 5 ms) ${p99 < 5 ? 'met' : 'MISSED'}; the bare Node proxy's at half its own peak: ${half.bare?.p99.toFixed(2)} ms, nginx's: ${half.nginx?.p99.toFixed(2)} ms`,
      `sluice / bare Node proxy: ${(((peaks.sluice as Peak).rps / (peaks.bare as Peak).rps) * 100).toFixed(0)}%   (what the limit, headers, logs and metrics cost inside Node)`,
      `sluice with JWT identity / sluice by IP: ${(((peaks['sluice-jwt'] as Peak).rps / (peaks.sluice as Peak).rps) * 100).toFixed(0)}%   (one HS256 token on every request, verified once and then believed until its exp, a minute at most)`,
      `peak runs, req/s (each target's is the median): ${Object.entries(runs).map(([name, peakRuns]) => `${name} ${peakRuns.map((run) => run.rps.toFixed(0)).join(' / ')}`).join('; ')}`,
    ]
    console.log(`\n${notes.join('\n')}`)
    emit({
      bench: 'gateway',
      title: `Gateway: wrk 1 thread x ${CONNECTIONS} connections x ${SECONDS} s, median of ${PEAK_RUNS} runs taken in rounds over the targets; p99 at half of each proxy's peak: wrk, the same connections each waiting a random time before each request, median of ${HALF_RUNS}`,
      columns: ['target', 'req/s', 'p50 ms', 'p99 ms', 'p99 at half peak', 'vs nginx'],
      rows: Object.entries(peaks).map(([name, peak]) => [LABELS[name] ?? name, Math.round(peak.rps), peak.p50.toFixed(2), peak.p99.toFixed(2),
        half[name] === undefined ? '' : `${half[name]?.p99.toFixed(2)} ms @${half[name]?.rps.toFixed(0)}/s`, `${((peak.rps / (peaks.nginx as Peak).rps) * 100).toFixed(0)}%`]),
      notes,
    })
  } finally {
    await Promise.all([gateway.stop(), jwtGateway.stop()])
  }
  await routeScaling(upstreamPort)
  await stalls(upstreamPort)
} finally {
  for (const child of children) child.kill('SIGQUIT')
  await sleep(200)
  rmSync(dir, { recursive: true, force: true })
}
