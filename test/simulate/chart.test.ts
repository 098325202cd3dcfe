import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { Resvg } from '@resvg/resvg-js'
import { timelineSvg } from '../../src/simulate/chart.ts'
import { defaultPolicies } from '../../src/simulate/command.ts'
import { simulate } from '../../src/simulate/simulate.ts'
import { pattern } from '../../src/simulate/traffic.ts'

const FONT = '/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf'

/** Rasterises an SVG with a known font; returns RGBA pixels. */
function render(svg: string): { width: number; height: number; pixels: Buffer } {
  const image = new Resvg(svg, { font: { fontFiles: [FONT], loadSystemFonts: false, defaultFontFamily: 'DejaVu Sans' } }).render()
  return { width: image.width, height: image.height, pixels: image.pixels }
}

/** Pixels darker than mid-grey inside a rectangle. */
function dark(image: ReturnType<typeof render>, x0: number, y0: number, x1: number, y1: number): number {
  let count = 0
  for (let y = y0; y < y1; y++) {
    for (let x = x0; x < x1; x++) {
      const i = (y * image.width + x) * 4
      if ((image.pixels[i]! + image.pixels[i + 1]! + image.pixels[i + 2]!) / 3 < 128) count++
    }
  }
  return count
}

describe('simulator charts', () => {
  const simulation = simulate(pattern('boundary-burst', { limit: 100, windowMs: 60_000 }), defaultPolicies(100, 60_000))
  const fixed = simulation.results[0]!

  it('render to a non-empty image, with both series drawn in the plot', () => {
    const image = render(timelineSvg(simulation, fixed))
    assert.deepEqual([image.width, image.height], [640, 280])
    let coloured = 0
    for (let i = 0; i < image.pixels.length; i += 4) {
      const [r, g, b] = [image.pixels[i]!, image.pixels[i + 1]!, image.pixels[i + 2]!]
      if (r > g + 40 && r > b + 40) coloured++ // the fixed window's red
    }
    assert.ok(coloured > 200, `${coloured} red pixels of admitted load`)
  })

  it('label both axes: the label pixels are there, and vanish when the labels are removed', () => {
    const svg = timelineSvg(simulation, fixed)
    assert.match(svg, />time \(s\)</)
    assert.match(svg, />units per 2s</)
    const unlabelled = svg.replace(/>time \(s\)</, '><').replace(/>units per 2s</, '><')
    const withLabels = render(svg)
    const without = render(unlabelled)
    // x label: centred under the plot; y label: rotated along the left edge.
    assert.ok(dark(withLabels, 300, 262, 400, 280) > 30, 'x-axis label drawn')
    assert.equal(dark(without, 300, 262, 400, 280), 0)
    assert.ok(dark(withLabels, 0, 100, 22, 220) > 30, 'y-axis label drawn')
    assert.equal(dark(without, 0, 100, 22, 220), 0)
    // Tick numbers on both axes.
    assert.ok(dark(withLabels, 20, 48, 52, 236) > 30, 'y ticks drawn')
  })

  it('sluice simulate writes the SVGs and a self-contained HTML report, and refuses a malformed CSV with line numbers', () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-sim-'))
    const cli = new URL('../../src/cli/main.ts', import.meta.url).pathname
    const run = (...args: string[]) => execFileSync(process.execPath, ['--import', 'tsx', cli, 'simulate', ...args], { encoding: 'utf8', stdio: 'pipe', timeout: 30_000 })
    try {
      const output = run('--pattern', 'boundary-burst', '--limit', '10', '--window', '10s', '--out', dir, '--html', join(dir, 'report.html'))
      assert.match(output, /fixed-window\s+fixed-window\s+20\/20\s+0\.0%\s+20 in 10s \(2\.00x\)/)
      assert.match(output, /sliding-log\s+sliding-log\s+10\/20\s+50\.0%\s+10 in 10s \(1\.00x\)/)
      assert.equal(readdirSync(dir).filter((f) => f.endsWith('.svg')).length, 5)
      const html = readFileSync(join(dir, 'report.html'), 'utf8')
      assert.equal(html.match(/<svg /g)?.length, 5)
      assert.doesNotMatch(html, /<script|src=|href=/)
      writeFileSync(join(dir, 'bad.csv'), '100,a\n200\nabc,b\n')
      assert.throws(() => run('--csv', join(dir, 'bad.csv')), (e: { status: number; stderr: string }) => {
        assert.equal(e.status, 1)
        assert.match(e.stderr, /line 2: expected/)
        assert.match(e.stderr, /line 3: timestamp "abc"/)
        return true
      })
      // A device that never ends, given by mistake, is refused at once (it used to be read until memory ran out).
      assert.throws(() => run('--csv', '/dev/zero'), (e: { status: number; stderr: string }) => {
        assert.equal(e.status, 1)
        assert.match(e.stderr, /^sluice simulate: cannot read \/dev\/zero: larger than 256 MiB: is it the right file\? \(a simulation replays at most 5,000,000 events: replay a sample\)/)
        return true
      })
      writeFileSync(join(dir, 'epoch.csv'), '1700000000,a\n1700000001,a\n1700000002,a\n')
      assert.match(run('--csv', join(dir, 'epoch.csv'), '--limit', '2', '--window', '1s'), /3 events, 1 key\(s\), 2001ms[^]*sliding-log\s+sliding-log\s+3\/3/)
      assert.match(run('--csv', join(dir, 'epoch.csv'), '--limit', '2', '--window', '1s', '--time-unit', 'ms'), /3 events, 1 key\(s\), 3ms[^]*sliding-log\s+sliding-log\s+2\/3/)
      assert.match(run('--csv', join(dir, 'epoch.csv'), '--limit', '2', '--window', '1d'), /sliding-log\s+sliding-log\s+2\/3/)
      assert.throws(() => run('--time-unit', 's'), (e: { status: number; stderr: string }) => e.status === 2 && /--time-unit applies to --csv timestamps only/.test(e.stderr))
      assert.throws(() => run('--csv', join(dir, 'epoch.csv'), '--time-unit', 'sec'), (e: { status: number; stderr: string }) => e.status === 2 && /--time-unit must be ms, s, us or ns, got sec/.test(e.stderr))
      assert.throws(() => run('--pattern', 'tsunami'), (e: { status: number; stderr: string }) => e.status === 2 && /^sluice simulate: unknown pattern "tsunami" \(known: [^)]*\)\n/.test(e.stderr))
      assert.throws(() => run('--pattern', 'burst'), (e: { status: number; stderr: string }) => e.status === 2 && /^sluice simulate: unknown pattern "burst" \(known: [^)]*\); did you mean "boundary-burst"\?\n/.test(e.stderr))
      // A slip on the command line is said as the CLI says the rest, with the usage after it.
      for (const [args, said] of [[['--algorithm', 'x'], 'unknown option --algorithm'], [['--csv'], '--csv needs a value'], [['--json=yes'], '--json takes no value'], [['--limit', '-3'], '--limit needs a value; write one that starts with "-" as --limit=VALUE'], [['extra'], 'unexpected argument "extra"'], [['--patern', 'steady'], 'unknown option --patern; did you mean "--pattern"?']] as const) {
        assert.throws(() => run(...args), (e: { status: number; stderr: string }) => e.status === 2 && e.stderr.startsWith(`sluice simulate: ${said}\n\nusage: sluice simulate`), args.join(' '))
      }
      // Where no directory can be made, an error rather than a hang (node's recursive mkdir spins on these) or a stack trace.
      symlinkSync(join(dir, 'gone'), join(dir, 'dangling'))
      for (const args of [['--out', join(dir, 'dangling', 'charts')], ['--out', '/proc/sluice/charts'], ['--out', join(dir, 'report.html')], ['--html', join(dir, 'nowhere', 'report.html')]]) {
        assert.throws(() => run('--limit', '10', ...args), (e: { status: number; stderr: string }) => {
          assert.equal(e.status, 1, args.join(' '))
          assert.match(e.stderr, /^sluice simulate: cannot write the charts: E[A-Z]+/)
          return true
        })
      }
      run('--limit', '10', '--out', join(dir, 'new', 'nested'))
      assert.equal(readdirSync(join(dir, 'new', 'nested')).length, 5)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe('the README figures', () => {
  it('are current (npm run figures)', async () => {
    const { figures } = await import('../../src/simulate/figures.ts')
    for (const [name, contents] of figures()) {
      assert.equal(readFileSync(new URL(`../../docs/simulate/${name}`, import.meta.url), 'utf8'), contents, `docs/simulate/${name} is stale: run npm run figures`)
    }
  })
})
