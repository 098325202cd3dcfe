import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { pathRewriter } from '../../src/gateway/proxy.ts'

describe('a route\'s path rewriting', () => {
  it('strips a prefix only where a whole segment matches it, then applies the rewrite', () => {
    const rewrite = pathRewriter({ stripPrefix: '/api', rewrite: { pattern: '^/v1/(.*)$', replacement: '/internal/$1' } })
    assert.deepEqual(['/api', '/api/', '/api/users', '/api/v1/users/7', '/apiary', '/other/api/x', '/API/users'].map(rewrite),
      ['/', '/', '/users', '/internal/users/7', '/apiary', '/other/api/x', '/API/users'])
    assert.equal(pathRewriter({ stripPrefix: '/' })('/a/b'), '/a/b')
    // A replacement that drops the leading slash still sends a path.
    assert.equal(pathRewriter({ rewrite: { pattern: '^/old/', replacement: 'new/' } })('/old/x'), '/new/x')
  })

  it('without case when the routes match without case: /API/v1/x took the route, and loses its prefix and is rewritten too', () => {
    const rewrite = pathRewriter({ stripPrefix: '/api', rewrite: { pattern: '^/v1/(.*)$', replacement: '/internal/$1' } }, false)
    assert.deepEqual(['/API/users', '/Api/V1/Users/7', '/apiary', '/api'].map(rewrite), ['/users', '/internal/Users/7', '/apiary', '/'])
  })
})
