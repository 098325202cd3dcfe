/**
 * A loopback TCP relay in front of a server that can be cut and healed: a
 * network partition, with the server and its state untouched behind it.
 */
import { connect, createServer, type Server, type Socket } from 'node:net'

export interface Partitionable {
  /** The relay's port: connect here instead of to the server. */
  port: number
  /** Passes on what clients send but nothing the server answers: a call the server runs whose answer is lost. */
  holdReplies(): void
  /** Drops every connection and refuses new ones. */
  cut(): void
  /** Accepts connections again, on the same port. */
  heal(): Promise<void>
}

export async function partitionable(serverPort: number): Promise<Partitionable> {
  const sockets = new Set<Socket>()
  let server: Server | undefined
  let holding = false
  const track = (socket: Socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', () => socket.destroy())
  }
  const listen = (port: number) => new Promise<number>((resolve, reject) => {
    const listening = createServer((client) => {
      const upstream = connect(serverPort, '127.0.0.1')
      track(client)
      track(upstream)
      client.on('close', () => upstream.destroy())
      upstream.on('close', () => client.destroy())
      client.pipe(upstream)
      upstream.on('data', (chunk: Buffer) => { if (!holding) client.write(chunk) })
    })
    listening.once('error', reject)
    listening.listen(port, '127.0.0.1', () => resolve((listening.address() as { port: number }).port))
    server = listening
  })
  const port = await listen(0)
  return {
    port,
    holdReplies() {
      holding = true
    },
    cut() {
      server?.close()
      server = undefined
      for (const socket of sockets) socket.destroy()
    },
    async heal() {
      holding = false
      await listen(port)
    },
  }
}
