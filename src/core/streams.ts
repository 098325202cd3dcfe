/**
 * `body`, read through: `done` is called once, when it ends (whole), or fails or its reader
 * cancels it (not whole). With `readAheadBytes`, up to that many are read before the reader
 * asks, so a body that fits has ended as soon as it has arrived, whether or not it is ever read.
 */
export function readThrough(body: ReadableStream<Uint8Array>, done: (whole: boolean) => void, readAheadBytes?: number): ReadableStream<Uint8Array> {
  const reader = body.getReader()
  let ended = false
  const end = (whole: boolean) => {
    if (ended) return
    ended = true
    done(whole)
  }
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const chunk = await reader.read()
        if (chunk.done) {
          controller.close()
          end(true)
        } else {
          controller.enqueue(chunk.value)
        }
      } catch (error) {
        end(false)
        controller.error(error)
      }
    },
    cancel(reason) {
      end(false)
      return reader.cancel(reason)
    },
  }, readAheadBytes === undefined ? undefined : new ByteLengthQueuingStrategy({ highWaterMark: readAheadBytes }))
}
