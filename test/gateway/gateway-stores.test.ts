/**
 * The gateway's other deployments: Redis Cluster and Sentinel stores named in
 * the YAML, HTTPS from PEM files, and shadow limits that count but never refuse.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { X509Certificate } from 'node:crypto'
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import type { Server } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { connect } from 'node:tls'
import { Agent, fetch as undiciFetch } from 'undici'
import { startDemoUpstream } from '../../src/gateway/demo-upstream.ts'
import { startCluster, type RedisCluster } from '../support/cluster.ts'
import { startGateway } from '../support/gateway.ts'
import { startRedis, type RedisServer } from '../support/redis.ts'
import { startSentinel, type Sentinel } from '../support/sentinel.ts'

const route = (upstream: string, limit = 5) => `
routes:
  - name: api
    upstream: ${upstream}
    limits:
      - policies: { algorithm: sliding-log, name: hourly, limit: ${limit}, windowMs: 3600000 }
`

async function statuses(url: string, count: number): Promise<number[]> {
  const result = []
  for (let i = 0; i < count; i++) result.push((await fetch(url)).status)
  return result
}

describe('gateway deployments', () => {
  let upstream: { server: Server; url: string }
  before(async () => { upstream = await startDemoUpstream() })
  after(() => upstream?.server.close())

  describe('on a Redis Cluster and through Sentinel (real servers)', () => {
    let cluster: RedisCluster
    let master: RedisServer
    let sentinel: Sentinel
    before(async () => {
      cluster = await startCluster()
      master = await startRedis()
      sentinel = await startSentinel('gw-master', master.port, async (ask) => Number(((await ask('get-master-addr-by-name', 'gw-master')) as string[] | undefined)?.[1]) === master.port)
    })
    after(async () => {
      await sentinel?.stop()
      await master?.stop()
      await cluster?.stop()
    })

    it('store.cluster: the limit holds exactly', async () => {
      const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
store: { type: redis, cluster: [${cluster.nodes.map((n) => `"127.0.0.1:${n.port}"`).join(', ')}] }
${route(upstream.url)}`)
      try {
        assert.deepEqual(await statuses(`${gateway.url}/hello`, 7), [200, 200, 200, 200, 200, 429, 429])
        const status = await (await fetch(`${gateway.adminUrl}/status`)).json() as { store: { type: string; up: boolean } }
        assert.deepEqual(status.store, { type: 'redis-cluster (3 seed nodes)', up: true })
      } finally {
        await gateway.stop()
      }
    })

    it('store.sentinel: the limit holds exactly, on the master the sentinel names', async () => {
      const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
store: { type: redis, sentinel: { sentinels: ["127.0.0.1:${sentinel.port}"], name: gw-master } }
prefix: via-sentinel
${route(upstream.url, 3)}`)
      try {
        assert.deepEqual(await statuses(`${gateway.url}/hello`, 5), [200, 200, 200, 429, 429])
        assert.equal(await master.client().exists('via-sentinel:http:{ip:127.0.0.1}:hourly'), 1)
      } finally {
        await gateway.stop()
      }
    })
  })

  it('serves HTTPS from the PEM files in server.tls; a renewed certificate applies when its files change, a mismatched pair is refused', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-tls-'))
    const makePair = (name: string) => {
      const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1',
        '-keyout', join(dir, `${name}key.pem`), '-out', join(dir, `${name}cert.pem`)], { encoding: 'utf8' })
      assert.equal(made.status, 0, made.stderr)
      return new X509Certificate(readFileSync(join(dir, `${name}cert.pem`))).fingerprint256
    }
    const served = async (url: string) => {
      const socket = connect({ host: '127.0.0.1', port: Number(new URL(url).port), rejectUnauthorized: false })
      await once(socket, 'secureConnect')
      const fingerprint = socket.getPeerCertificate().fingerprint256
      socket.destroy()
      return fingerprint
    }
    try {
      const first = makePair('')
      const gateway = await startGateway(`
server: { listen: 127.0.0.1:0, tls: { cert: ${join(dir, 'cert.pem')}, key: ${join(dir, 'key.pem')} } }
admin: { listen: 127.0.0.1:0 }
${route(upstream.url)}`)
      try {
        assert.match(gateway.url, /^https:\/\//)
        const dispatcher = new Agent({ connect: { rejectUnauthorized: false } })
        const response = await undiciFetch(`${gateway.url}/hello`, { dispatcher })
        assert.equal(response.status, 200)
        assert.equal(((await response.json()) as { forwardedProto: string }).forwardedProto, 'https')
        await dispatcher.close()
        assert.equal(await served(gateway.url), first)

        // Half a renewal: the new certificate beside the old key. Refused by name; the running pair stays.
        const renewed = makePair('new-')
        writeFileSync(join(dir, 'cert.pem'), readFileSync(join(dir, 'new-cert.pem')))
        const refused = await gateway.waitForLog((l) => l.msg === 'config refused; the running config stays')
        assert.match(String((refused.problems as string[])[0]), /^server\.tls: the cert and key files cannot serve TLS: .*key values mismatch/)
        assert.equal(await served(gateway.url), first)
        // The whole renewal: new connections get the new certificate, with no restart.
        writeFileSync(join(dir, 'key.pem'), readFileSync(join(dir, 'new-key.pem')))
        const reloaded = await gateway.waitForLog((l) => l.msg === 'config reloaded')
        assert.equal(reloaded.needsRestart, undefined)
        assert.equal(await served(gateway.url), renewed)
        assert.equal((await undiciFetch(`${gateway.url}/hello`, { dispatcher: new Agent({ connect: { rejectUnauthorized: false } }) })).status, 200)
      } finally {
        await gateway.stop()
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('shadow limits decide and count but never refuse; a route limit may be shadowed alone', async () => {
    const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
routes:
  - name: api
    upstream: ${upstream.url}
    limits:
      - { name: trial, shadow: true, policies: { algorithm: fixed-window, name: trial, limit: 2, windowMs: 3600000 } }
`)
    try {
      assert.deepEqual(await statuses(`${gateway.url}/hello`, 4), [200, 200, 200, 200])
      const metrics = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
      assert.match(metrics, /^sluice_decisions_total\{route="api",policy="trial",outcome="shadow_limited"\} 2$/m)
      assert.match(metrics, /^sluice_decisions_total\{route="api",policy="trial",outcome="allowed"\} 2$/m)
    } finally {
      await gateway.stop()
    }
  })
})
