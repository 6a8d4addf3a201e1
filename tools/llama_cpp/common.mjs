// What both scripts share: their option checks and how they load llama.cpp.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

/** The integer value of option `--name`, which must be at least 1. */
export function positiveInt(name, text) {
    const value = Number(text);
    if (!Number.isInteger(value) || value < 1)
        throw new Error(`--${name} must be a positive integer, got "${text}"`);
    return value;
}

/** node-llama-cpp's flashAttention setting for `--flash-attn auto|on|off`. */
export function flashAttention(text) {
    const value = {auto: "auto", on: true, off: false}[text];
    if (value === undefined)
        throw new Error(`--flash-attn must be auto, on or off, got "${text}"`);
    return value;
}

/**
 * llama.cpp's CPU backend with `threads` threads and the model at
 * `modelPath` on it, as {llama, model}: the prebuilt @node-llama-cpp/linux-x64
 * binary or an error, never a source build or a download.
 */
export async function loadCpuModel(modelPath, threads) {
    const llama = await getLlama({
        gpu: false,
        build: "never",
        skipDownload: true,
        usePrebuiltBinaries: true,
        maxThreads: threads,
        logLevel: LlamaLogLevel.error,
        progressLogs: false
    });
    const model = await llama.loadModel({modelPath, gpuLayers: 0});
    return {llama, model};
}
