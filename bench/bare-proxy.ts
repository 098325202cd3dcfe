/**
 * The floor for bench:gateway: the least a Node reverse proxy does (undici
 * dispatch straight into the response, no limiter, no header handling, no
 * metrics). What the gateway loses against it is sluice's own cost; what this
 * loses against nginx is Node's.
 *
 *   node --import tsx bench/bare-proxy.ts UPSTREAM_PORT   (prints its port)
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Agent, type Dispatcher } from 'undici'

const upstream = `http://127.0.0.1:${process.argv[2] ?? '0'}`
const host = new URL(upstream).host
const agent = new Agent({ keepAliveTimeout: 5000, connections: 256 })
const server = createServer((req, res) => {
  agent.dispatch({ origin: upstream, path: req.url ?? '/', method: req.method as Dispatcher.HttpMethod, headers: { host } }, {
    onRequestStart() {},
    onResponseStart(_controller, statusCode, headers) { res.writeHead(statusCode, headers as Record<string, string>) },
    onResponseData(_controller, chunk) { res.write(chunk) },
    onResponseEnd() { res.end() },
    onResponseError() { res.destroy() },
  })
})
server.listen(0, '127.0.0.1', () => console.log((server.address() as AddressInfo).port))
process.on('SIGTERM', () => process.exit(0))
