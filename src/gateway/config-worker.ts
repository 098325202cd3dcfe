/**
 * The worker thread a config is read on, at the gateway's start, on its
 * reloads and by the CLI (see loadConfigInWorker in config.ts): it loads the
 * file and sends back the config (in parts: see configInParts), or the file's problems.
 */
import { isMainThread, parentPort, workerData } from 'node:worker_threads'
import { ConfigError, configInParts, loadConfig, type ConfigWorkerAnswer, type ConfigWorkerData } from './config.ts'

if (isMainThread || parentPort === null) throw new Error('sluice: gateway/config-worker runs as a worker thread only')
const { file, env } = workerData as ConfigWorkerData
let answer: ConfigWorkerAnswer
try {
  answer = { configParts: configInParts(await loadConfig(file, env)) }
} catch (error) {
  answer = error instanceof ConfigError ? { problems: [...error.problems], count: error.count } : { error: error instanceof Error ? error.message : String(error) }
}
parentPort.postMessage(answer)
