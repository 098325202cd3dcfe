/** The admin listener's reading of a scraper's Accept-Encoding (the listener itself runs in gateway.test.ts). */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { acceptsGzip } from '../../src/gateway/admin.ts'

describe('admin /metrics content coding', () => {
  it('compresses for a scraper that takes gzip, by name or by *, with a weight above 0, and for no other', () => {
    const cases: Array<[string | undefined, boolean]> = [
      [undefined, false], ['', false], ['identity', false], ['br', false], ['deflate, br', false],
      ['gzip', true], ['GZIP', true], ['x-gzip', true], ['deflate, gzip;q=0.5', true], ['gzip ; q=1.0', true], ['*', true], ['br, *;q=0.1', true],
      ['gzip;q=0', false], ['gzip;q=0.000', false], ['*;q=0', false], ['gzip;q=0, *', false], ['gzip;q=abc', false],
    ]
    for (const [field, expected] of cases) assert.equal(acceptsGzip(field), expected, String(field))
  })
})
