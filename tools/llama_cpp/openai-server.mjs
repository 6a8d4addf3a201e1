#!/usr/bin/env node
// A minimal OpenAI-compatible completions server over node-llama-cpp's
// prebuilt llama.cpp (CPU only), standing in for `llama-server -np N` when
// comparing against `caflm bench-serve`.
//
// Endpoints: POST /v1/completions, GET /v1/models, GET /health.
// Up to --parallel requests run at once, each on its own context sequence;
// node-llama-cpp packs the pending tokens of all sequences (prefill chunks of
// new requests beside decode steps of running ones) into one llama_decode per
// event-loop cycle, which is continuous batching. Further requests wait in a
// FIFO queue for a free sequence.
//
// --ctx-size is the total KV size as in llama-server: each sequence gets
// ctx-size / parallel tokens.

import http from "node:http";
import path from "node:path";
import {parseArgs} from "node:util";
import {flashAttention, loadCpuModel, positiveInt} from "./common.mjs";

const usage = `usage: node openai-server.mjs --model FILE [--port 8080] [--host 127.0.0.1]
       [--parallel 4] [--threads 2] [--ctx-size 8192] [--batch-size 512] [--flash-attn auto|on|off]`;

function parseCli() {
    const {values} = parseArgs({
        options: {
            "model": {type: "string"},
            "host": {type: "string", default: "127.0.0.1"},
            "port": {type: "string", default: "8080"},
            "parallel": {type: "string", default: "4"},
            "threads": {type: "string", default: "2"},
            "ctx-size": {type: "string"},
            "batch-size": {type: "string", default: "512"},
            "flash-attn": {type: "string", default: "auto"},
            "help": {type: "boolean", short: "h", default: false}
        }
    });
    if (values.help) {
        console.log(usage);
        process.exit(0);
    }
    if (values.model == null)
        throw new Error("--model FILE is required\n" + usage);
    const flashAttn = flashAttention(values["flash-attn"]);
    const parallel = positiveInt("parallel", values.parallel);
    const ctxSize = values["ctx-size"] == null ? 2048 * parallel : positiveInt("ctx-size", values["ctx-size"]);
    const sequenceSize = Math.floor(ctxSize / parallel);
    if (sequenceSize < 2)
        throw new Error(`--ctx-size ${ctxSize} leaves under 2 tokens for each of ${parallel} sequences`);
    return {
        model: path.resolve(values.model),
        host: values.host,
        port: positiveInt("port", values.port),
        parallel,
        threads: positiveInt("threads", values.threads),
        sequenceSize,
        batchSize: positiveInt("batch-size", values["batch-size"]),
        flashAttn
    };
}

/// Counts llama_decode calls and generated tokens, so that the log tells
/// whether concurrent requests shared batches. Uses node-llama-cpp's internal
/// addon handle (its methods are read-only, so the handle becomes a proxy);
/// without it the call count stays null.
function countDecodeCalls(context) {
    const stats = {decodeCalls: null, generatedTokens: 0};
    const addonContext = context._ctx;
    if (addonContext == null || typeof addonContext.decodeBatch !== "function")
        return stats;
    stats.decodeCalls = 0;
    context._ctx = new Proxy(addonContext, {
        get(target, property) {
            const value = Reflect.get(target, property, target);
            if (typeof value !== "function")
                return value;
            if (property === "decodeBatch")
                return (...args) => {
                    stats.decodeCalls++;
                    return value.apply(target, args);
                };
            return value.bind(target);
        }
    });
    return stats;
}

/// An error that becomes an OpenAI-style error response.
class RequestError extends Error {
    constructor(status, message, type = "invalid_request_error") {
        super(message);
        this.status = status;
        this.type = type;
    }
}

/// Hands out context sequences; requests beyond them wait first in, first out.
class SequencePool {
    constructor(sequences) {
        this.free = [...sequences];
        this.waiting = [];
    }

    acquire() {
        if (this.free.length > 0)
            return Promise.resolve(this.free.pop());
        return new Promise((resolve) => this.waiting.push(resolve));
    }

    release(sequence) {
        const next = this.waiting.shift();
        if (next != null)
            next(sequence);
        else
            this.free.push(sequence);
    }

    get busy() {
        return this.waiting.length;
    }
}

function readBody(request, limitBytes = 16 << 20) {
    return new Promise((resolve, reject) => {
        const chunks = [];
        let size = 0;
        request.on("data", (chunk) => {
            size += chunk.length;
            if (size > limitBytes) {
                reject(new RequestError(413, "request body too large"));
                request.destroy();
                return;
            }
            chunks.push(chunk);
        });
        request.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
        request.on("error", reject);
    });
}

function sendJson(response, status, body) {
    const text = JSON.stringify(body);
    response.writeHead(status, {"Content-Type": "application/json", "Content-Length": Buffer.byteLength(text)});
    response.end(text);
}

function sendError(response, error) {
    const status = error instanceof RequestError ? error.status : 500;
    const type = error instanceof RequestError ? error.type : "server_error";
    if (response.headersSent) {
        // Mid-stream: the client reads errors as an SSE event.
        response.end(`data: ${JSON.stringify({error: {message: String(error.message), type}})}\n\n`);
        return;
    }
    sendJson(response, status, {error: {message: String(error.message), type, code: status}});
}

class CompletionServer {
    constructor({llama, model, context, options, stats}) {
        this.llama = llama;
        this.stats = stats;
        this.model = model;
        this.options = options;
        this.modelId = path.basename(options.model);
        this.vocabSize = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? null;
        this.pool = new SequencePool(Array.from({length: options.parallel}, () => context.getSequence()));
        this.nextId = 0;
        this.created = Math.floor(Date.now() / 1000);
    }

    /// The prompt as token ids: OpenAI accepts a string or an array of ids
    /// (a one-element array of either is the same as the element).
    promptTokens(prompt) {
        if (Array.isArray(prompt) && prompt.length === 1 && (typeof prompt[0] === "string" || Array.isArray(prompt[0])))
            prompt = prompt[0];
        if (typeof prompt === "string") {
            // As llama-server does for text prompts: BOS first when the model wants it.
            const tokens = this.model.tokenize(prompt, false);
            const bos = this.model.tokens.bos;
            const addBos = this.model.fileInfo.metadata?.tokenizer?.ggml?.add_bos_token ?? true;
            return addBos && bos != null && tokens[0] !== bos ? [bos, ...tokens] : tokens;
        }
        if (Array.isArray(prompt)) {
            for (const token of prompt)
                if (!Number.isInteger(token) || token < 0 || (this.vocabSize != null && token >= this.vocabSize))
                    throw new RequestError(400, `prompt token ${token} is not an id in [0, ${this.vocabSize})`);
            return prompt;
        }
        throw new RequestError(400, "\"prompt\" must be a string or an array of token ids (one prompt per request)");
    }

    parseCompletionRequest(text) {
        let body;
        try {
            body = JSON.parse(text);
        } catch {
            throw new RequestError(400, "the body is not JSON");
        }
        if (body == null || typeof body !== "object")
            throw new RequestError(400, "the body must be a JSON object");
        if (body.prompt == null)
            throw new RequestError(400, "\"prompt\" is required");
        const n = body.n ?? 1;
        if (n !== 1)
            throw new RequestError(400, "only n = 1 is supported");
        const maxTokens = body.max_tokens ?? 16;
        if (!Number.isInteger(maxTokens) || maxTokens < 0)
            throw new RequestError(400, "\"max_tokens\" must be a non-negative integer");
        const temperature = body.temperature ?? 1;
        if (typeof temperature !== "number" || temperature < 0)
            throw new RequestError(400, "\"temperature\" must be a non-negative number");
        const tokens = this.promptTokens(body.prompt);
        if (tokens.length === 0)
            throw new RequestError(400, "the prompt is empty");
        if (tokens.length >= this.options.sequenceSize)
            throw new RequestError(400, `the prompt has ${tokens.length} tokens; a sequence holds ${this.options.sequenceSize}`);
        return {
            tokens,
            maxTokens,
            temperature,
            // Unset samplers take llama-server's defaults.
            topP: body.top_p ?? 0.95,
            topK: body.top_k ?? 40,
            minP: body.min_p ?? 0.05,
            seed: Number.isInteger(body.seed) ? body.seed : undefined,
            ignoreEos: body.ignore_eos === true,
            stream: body.stream === true,
            includeUsage: body.stream_options?.include_usage === true,
            model: typeof body.model === "string" ? body.model : this.modelId
        };
    }

    /// Generates on one sequence, calling onToken(token, textDelta) per token.
    async generate(sequence, request, onToken, isCancelled) {
        // Prompt cache, as llama-server's cache_prompt: keep the common prefix
        // of what the sequence holds, and always evaluate at least one token.
        const held = sequence.contextTokens;
        let common = 0;
        while (common < held.length && common < request.tokens.length - 1 && held[common] === request.tokens[common])
            common++;
        if (common < held.length)
            await sequence.eraseContextTokenRanges([{start: common, end: held.length}]);

        // Leave the context shift alone: stop at the sequence's end instead.
        const limit = Math.min(request.maxTokens, this.options.sequenceSize - request.tokens.length);
        const generated = [];
        let textSoFar = "";
        let finishReason = "length";
        if (limit > 0) {
            const generator = sequence.evaluate(request.tokens.slice(common), {
                temperature: request.temperature,
                topK: request.topK,
                topP: request.topP,
                minP: request.minP,
                seed: request.seed,
                yieldEogToken: request.ignoreEos
            });
            try {
                let result = await generator.next();
                while (!result.done && !isCancelled()) {
                    generated.push(result.value);
                    this.stats.generatedTokens++;
                    // Decode the whole output and send what is new, holding back
                    // an unfinished UTF-8 sequence.
                    const text = this.model.detokenize(generated);
                    let delta = "";
                    if (!text.endsWith("\uFFFD") && text.length >= textSoFar.length) {
                        delta = text.slice(textSoFar.length);
                        textSoFar = text;
                    }
                    onToken(result.value, delta);
                    if (generated.length >= limit)
                        break;
                    result = await generator.next();
                }
                if (result.done)
                    finishReason = "stop";
            } finally {
                await generator.return();
            }
        }
        return {generated, finishReason, cachedTokens: common};
    }

    async completions(httpRequest, response) {
        const request = this.parseCompletionRequest(await readBody(httpRequest));
        const id = `cmpl-${this.nextId++}`;
        let cancelled = false;
        response.on("close", () => {
            if (!response.writableFinished)
                cancelled = true;
        });
        const chunk = (choice, extra = {}) => ({
            id,
            object: "text_completion",
            created: Math.floor(Date.now() / 1000),
            model: request.model,
            choices: choice == null ? [] : [choice],
            ...extra
        });
        const usage = (outcome) => ({
            prompt_tokens: request.tokens.length,
            completion_tokens: outcome.generated.length,
            total_tokens: request.tokens.length + outcome.generated.length,
            prompt_tokens_details: {cached_tokens: outcome.cachedTokens}
        });

        const sequence = await this.pool.acquire();
        try {
            if (cancelled)
                return;
            if (request.stream) {
                response.writeHead(200, {
                    "Content-Type": "text/event-stream",
                    "Cache-Control": "no-cache",
                    "Connection": "keep-alive"
                });
                const outcome = await this.generate(sequence, request, (token, text) => {
                    response.write(`data: ${JSON.stringify(chunk({index: 0, text, token_ids: [token], logprobs: null, finish_reason: null}))}\n\n`);
                }, () => cancelled);
                if (cancelled)
                    return;
                response.write(`data: ${JSON.stringify(chunk({index: 0, text: "", logprobs: null, finish_reason: outcome.finishReason}))}\n\n`);
                if (request.includeUsage)
                    response.write(`data: ${JSON.stringify(chunk(null, {usage: usage(outcome)}))}\n\n`);
                response.end("data: [DONE]\n\n");
            } else {
                const outcome = await this.generate(sequence, request, () => {}, () => cancelled);
                if (cancelled)
                    return;
                sendJson(response, 200, chunk({
                    index: 0,
                    text: this.model.detokenize(outcome.generated),
                    logprobs: null,
                    finish_reason: outcome.finishReason
                }, {usage: usage(outcome)}));
            }
        } finally {
            this.pool.release(sequence);
        }
    }

    async handle(httpRequest, response) {
        const url = new URL(httpRequest.url, "http://localhost");
        const route = `${httpRequest.method} ${url.pathname.replace(/\/+$/, "")}`;
        try {
            if (route === "GET /health")
                sendJson(response, 200, {status: "ok"});
            else if (route === "GET /v1/models" || route === "GET /models")
                sendJson(response, 200, {
                    object: "list",
                    data: [{id: this.modelId, object: "model", created: this.created, owned_by: "llama.cpp"}]
                });
            else if (route === "POST /v1/completions" || route === "POST /completions")
                await this.completions(httpRequest, response);
            else
                throw new RequestError(404, `no route for ${httpRequest.method} ${url.pathname}`, "not_found_error");
        } catch (error) {
            if (!(error instanceof RequestError))
                console.error(`openai-server: ${route}: ${error?.stack ?? error}`);
            if (!response.writableEnded)
                sendError(response, error);
        }
    }
}

async function main() {
    const options = parseCli();
    const {llama, model} = await loadCpuModel(options.model, options.threads);
    const context = await model.createContext({
        sequences: options.parallel,
        contextSize: options.sequenceSize,
        batchSize: Math.max(options.batchSize, options.parallel),
        threads: {ideal: options.threads, min: options.threads},
        flashAttention: options.flashAttn
    });
    const stats = countDecodeCalls(context);
    const server = new CompletionServer({llama, model, context, options, stats});
    const httpServer = http.createServer((request, response) => void server.handle(request, response));
    httpServer.keepAliveTimeout = 65_000;
    httpServer.listen(options.port, options.host, () => {
        console.error(`openai-server: ${server.modelId} on http://${options.host}:${options.port} ` +
            `(${options.parallel} sequences of ${options.sequenceSize} tokens, ${options.threads} threads, ` +
            `batch ${options.batchSize}, llama.cpp ${llama.llamaCppRelease?.release ?? "?"} cpu)`);
    });
    const shutdown = () => {
        console.error(`openai-server: ${stats.generatedTokens} tokens generated in ${stats.decodeCalls} llama_decode calls`);
        httpServer.close();
        httpServer.closeAllConnections?.();
        void context.dispose().then(() => model.dispose()).then(() => llama.dispose()).finally(() => process.exit(0));
    };
    process.on("SIGINT", shutdown);
    process.on("SIGTERM", shutdown);
}

main().catch((error) => {
    console.error(`openai-server: ${error?.message ?? error}`);
    process.exit(1);
});
