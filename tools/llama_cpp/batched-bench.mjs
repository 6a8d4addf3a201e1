#!/usr/bin/env node
// An equivalent of llama.cpp's `llama-batched-bench -npp P -ntg G -npl B1,B2,..
// -t T`, run through node-llama-cpp's prebuilt llama.cpp (CPU only).
//
// For each B: B sequences each get a P-token prompt of random token ids
// (fixed seed), all prefilled together; then G decode steps, each evaluating
// one token of every sequence in one llama_decode. Greedy sampling; EOG tokens
// do not end a sequence. Like llama-batched-bench:
//   prefill_tok_s = B*P / (time to evaluate all B*P prompt tokens)
//   decode_tok_s  = B*G / (time for the G decode steps)
// Prints one JSON object per B on stdout; diagnostics go to stderr.

import {parseArgs} from "node:util";
import path from "node:path";
import {flashAttention, loadCpuModel, positiveInt} from "./common.mjs";

const usage = `usage: node batched-bench.mjs --model FILE [--npp 128] [--ntg 64] [--npl 1,32]
       [--threads 2] [--repeat 1] [--batch-size 512] [--flash-attn auto|on|off] [--seed 42]`;

function parseCli() {
    const {values} = parseArgs({
        options: {
            "model": {type: "string"},
            "npp": {type: "string", default: "128"},
            "ntg": {type: "string", default: "64"},
            "npl": {type: "string", default: "1,32"},
            "threads": {type: "string", default: "2"},
            "repeat": {type: "string", default: "1"},
            // node-llama-cpp sets n_ubatch = n_batch; 512 is llama.cpp's default n_ubatch.
            "batch-size": {type: "string", default: "512"},
            "flash-attn": {type: "string", default: "auto"},
            "seed": {type: "string", default: "42"},
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
    return {
        model: path.resolve(values.model),
        npp: positiveInt("npp", values.npp),
        ntg: positiveInt("ntg", values.ntg),
        npl: values.npl.split(",").map((text) => positiveInt("npl", text.trim())),
        threads: positiveInt("threads", values.threads),
        repeat: positiveInt("repeat", values.repeat),
        batchSize: positiveInt("batch-size", values["batch-size"]),
        flashAttn,
        seed: positiveInt("seed", values.seed)
    };
}

/// Deterministic token ids (mulberry32), so every run and engine sees the same prompts.
function makeRandom(seed) {
    let state = seed >>> 0;
    return () => {
        state = (state + 0x6D2B79F5) >>> 0;
        let t = state;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

function median(values) {
    const sorted = [...values].sort((a, b) => a - b);
    const mid = Math.floor(sorted.length / 2);
    return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/// Counts llama_decode calls of a context, to show that the B sequences of a
/// step share one batch. Uses node-llama-cpp's internal addon handle; when
/// that is not there the count is reported as null.
function countDecodeCalls(context) {
    const addonContext = context._ctx;
    if (addonContext == null || typeof addonContext.decodeBatch !== "function")
        return () => null;
    // The addon's methods are read-only, so the handle is swapped for a proxy.
    let calls = 0;
    context._ctx = new Proxy(addonContext, {
        get(target, property) {
            const value = Reflect.get(target, property, target);
            if (typeof value !== "function")
                return value;
            if (property === "decodeBatch")
                return (...args) => {
                    calls++;
                    return value.apply(target, args);
                };
            return value.bind(target);
        }
    });
    return () => calls;
}

/// One prefill + G decode steps over all sequences of `context`.
async function runOnce(sequences, prompts, ntg, decodeCalls) {
    const evaluateOptions = {temperature: 0, yieldEogToken: true};
    const generators = sequences.map((sequence, i) => sequence.evaluate(prompts[i], evaluateOptions));

    // Prefill: all prompts are queued in the same tick, so node-llama-cpp packs
    // them into batches of --batch-size tokens; it ends when every sequence has
    // the logits of its last prompt token (and its first sampled token).
    const callsBefore = decodeCalls();
    const prefillStart = process.hrtime.bigint();
    let results = await Promise.all(generators.map((generator) => generator.next()));
    const prefillSeconds = Number(process.hrtime.bigint() - prefillStart) / 1e9;
    const prefillCalls = decodeCalls() - callsBefore;

    // Decode: each step feeds every sequence its last token in the same tick.
    const decodeStart = process.hrtime.bigint();
    for (let step = 0; step < ntg; step++) {
        for (const result of results)
            if (result.done)
                throw new Error("a sequence stopped generating before --ntg steps");
        results = await Promise.all(generators.map((generator) => generator.next()));
    }
    const decodeSeconds = Number(process.hrtime.bigint() - decodeStart) / 1e9;
    const decodeStepCalls = decodeCalls() - callsBefore - prefillCalls;

    await Promise.all(generators.map((generator) => generator.return()));
    return {prefillSeconds, decodeSeconds, prefillCalls, decodeStepCalls};
}

async function main() {
    const options = parseCli();
    const {llama, model} = await loadCpuModel(options.model, options.threads);
    const vocabSize = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length;
    if (typeof vocabSize !== "number" || vocabSize < 1)
        throw new Error(`cannot tell the vocabulary size of ${options.model}`);
    console.error(`batched-bench: ${path.basename(options.model)}, vocab ${vocabSize}, ` +
        `llama.cpp ${llama.llamaCppRelease?.release ?? "?"} (${llama.gpu === false ? "cpu" : llama.gpu}), ` +
        `threads ${options.threads}, batch ${options.batchSize}`);

    for (const b of options.npl) {
        if (b > options.batchSize)
            throw new Error(`--npl ${b} exceeds --batch-size ${options.batchSize}: a decode step would not fit one batch`);
        const context = await model.createContext({
            sequences: b,
            // Per sequence; +1 keeps node-llama-cpp's context shift out of the way.
            contextSize: options.npp + options.ntg + 1,
            batchSize: options.batchSize,
            threads: {ideal: options.threads, min: options.threads},
            flashAttention: options.flashAttn
        });
        const decodeCalls = countDecodeCalls(context);
        const sequences = Array.from({length: b}, () => context.getSequence());
        const random = makeRandom(options.seed);
        const prompts = sequences.map(() =>
            Array.from({length: options.npp}, () => Math.floor(random() * vocabSize)));

        // Warm-up (as llama-batched-bench does): one short run, not measured.
        await runOnce(sequences, prompts.map((prompt) => prompt.slice(0, 8)), 2, decodeCalls);

        const prefill = [];
        const decode = [];
        for (let r = 0; r < options.repeat; r++) {
            await Promise.all(sequences.map((sequence) => sequence.clearHistory()));
            const run = await runOnce(sequences, prompts, options.ntg, decodeCalls);
            prefill.push(b * options.npp / run.prefillSeconds);
            decode.push(b * options.ntg / run.decodeSeconds);
            console.error(`  B=${b} run ${r + 1}: prefill ${run.prefillSeconds.toFixed(3)} s in ` +
                `${run.prefillCalls} llama_decode calls, decode ${run.decodeSeconds.toFixed(3)} s in ` +
                `${run.decodeStepCalls} llama_decode calls for ${options.ntg} steps`);
        }
        console.log(JSON.stringify({
            engine: "llama.cpp",
            b,
            pp: options.npp,
            tg: options.ntg,
            threads: options.threads,
            prefill_tok_s: Number(median(prefill).toFixed(2)),
            decode_tok_s: Number(median(decode).toFixed(2))
        }));
        await context.dispose();
    }
    await model.dispose();
    await llama.dispose();
}

main().catch((error) => {
    console.error(`batched-bench: ${error?.message ?? error}`);
    process.exit(1);
});
