/**
 * ops/: the alert rules and the Grafana dashboard are valid for their tools and
 * only use metrics the gateway exports.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { describe, it } from 'node:test'
import { parse } from 'yaml'
import { GatewayMetrics } from '../../src/metrics/metrics.ts'

const ops = new URL('../../ops/', import.meta.url).pathname
const promtool = spawnSync('promtool', ['--version']).status === 0

interface Rule { alert: string; expr: string; for?: string; labels?: Record<string, string>; annotations?: Record<string, string> }

/** Every metric the gateway exports, with the series names histograms add. */
async function exported(): Promise<Set<string>> {
  const metrics = await new GatewayMetrics().registry.getMetricsAsJSON()
  return new Set(metrics.flatMap((m) => (String(m.type) === 'histogram' ? ['_bucket', '_sum', '_count'].map((s) => `${m.name}${s}`) : [m.name])))
}

/** Metric names in a PromQL expression (identifiers followed by a selector or a range, not functions or keywords). */
function metricNames(expr: string): string[] {
  return [...expr.matchAll(/\b(sluice_[a-z_]+)\b/g)].map((m) => m[1] as string)
}

describe('ops: alert rules and dashboard', () => {
  const rules = (parse(readFileSync(`${ops}alerts.yml`, 'utf8')) as { groups: Array<{ name: string; rules: Rule[] }> }).groups.flatMap((g) => g.rules)

  it('the alert rules pass promtool (check and unit tests), or a structural check where promtool is missing', () => {
    if (promtool) {
      const check = spawnSync('promtool', ['check', 'rules', 'alerts.yml'], { cwd: ops, encoding: 'utf8' })
      assert.equal(check.status, 0, check.stdout + check.stderr)
      const test = spawnSync('promtool', ['test', 'rules', 'alerts.test.yml'], { cwd: ops, encoding: 'utf8' })
      assert.equal(test.status, 0, test.stdout + test.stderr)
    }
    const names = rules.map((r) => r.alert)
    assert.deepEqual(names, ['SluiceHighRejectionRatio', 'SluiceRejectionSpike', 'SluiceStoreDown', 'SluiceDegraded', 'SluiceStoreErrors', 'SluiceRefundsDropped', 'SluiceUpstreamUnhealthy', 'SluiceNoHealthyUpstream', 'SluiceLogLinesDropped', 'SluiceCertificateExpiring'])
    for (const rule of rules) {
      assert.ok(rule.expr.trim() !== '', `${rule.alert} has an expression`)
      assert.match(rule.for ?? '', /^\d+[smh]$/, `${rule.alert} has a duration`)
      assert.ok(['warning', 'critical'].includes(rule.labels?.severity ?? ''), `${rule.alert} has a severity`)
      assert.ok(rule.annotations?.summary !== undefined && rule.annotations.description !== undefined)
    }
    assert.match(rules[0]?.expr ?? '', /> 0\.30/)
    assert.equal(rules[0]?.for, '2m')
  })

  it('rules and dashboard query only metrics the gateway exports', async () => {
    const known = await exported()
    const dashboard = JSON.parse(readFileSync(`${ops}grafana-dashboard.json`, 'utf8')) as { panels: Array<{ id: number; title: string; gridPos: object; targets: Array<{ expr: string }> }>; templating: { list: Array<{ definition?: string }> } }
    const exprs = [
      ...rules.map((r) => r.expr),
      ...dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr)),
      ...dashboard.templating.list.flatMap((v) => (v.definition === undefined ? [] : [v.definition])),
    ]
    const unknown = exprs.flatMap(metricNames).filter((name) => !known.has(name))
    assert.deepEqual([...new Set(unknown)], [])
    // A dashboard Grafana imports: unique panel ids, each placed and with a query.
    const ids = dashboard.panels.map((p) => p.id)
    assert.equal(new Set(ids).size, ids.length)
    for (const panel of dashboard.panels) {
      assert.ok(panel.gridPos !== undefined && panel.targets.length > 0, panel.title)
    }
  })
})

describe('store call failures in the gateway log', () => {
  it('logs each distinct failure when it appears, then at most every 10 s while it lasts, with the calls failed in between', async () => {
    const { StoreCallFailures } = await import('../../src/limiter/store-failures.ts')
    let now = Date.UTC(2026, 10, 23)
    const lines: Array<Record<string, unknown>> = []
    const failures = new StoreCallFailures((failure) => lines.push({ ...failure }), () => now)
    const readOnly = new Error("READONLY You can't write against a read only replica.")
    for (let i = 0; i < 5; i++) failures.observe('store-error', readOnly)
    assert.deepEqual(lines, [{ reason: 'store-error', error: readOnly.message }])
    failures.observe('timeout', new Error('no answer within the store timeout (250 ms)'))
    assert.equal(lines.length, 2, 'a new failure is logged at once')
    now += 9_999
    failures.observe('store-error', readOnly)
    assert.equal(lines.length, 2)
    now += 1
    failures.observe('store-error', readOnly)
    // The 4 repeats before the timeout's line were counted on that line's interval; 1 failed since it.
    assert.deepEqual(lines[1], { reason: 'timeout', error: 'no answer within the store timeout (250 ms)', failedSinceLastLog: 4 })
    assert.deepEqual(lines[2], { reason: 'store-error', error: readOnly.message, failedSinceLastLog: 1 })
    assert.deepEqual(failures.current, { reason: 'store-error', error: readOnly.message, at: new Date(now).toISOString() })
    failures.observe('ok', undefined)
    assert.equal(failures.current, undefined, 'a call that succeeds ends the failure')
  })
})
