/*
 * libpulseinfer: the C ABI (version 0).
 *
 * One header, plain exported functions with the prefix pulse_, C99 and C++ clean. No C++
 * exception crosses this boundary; every function validates its arguments.
 *
 * Conventions that hold for every function below:
 *
 * - Status. Functions return a pulse_status: PULSE_OK (0); a positive code for a recoverable
 *   condition that is not an error (the request was cancelled, is not finished yet...); a
 *   negative code for an error. After any non-OK status, pulse_last_error() describes it.
 *
 * - Handles. pulse_model is an immutable, reference-counted model (pulse_model_retain /
 *   pulse_model_free). pulse_engine is internally synchronized. Requests are named by a
 *   uint64_t id, never 0, unique within their engine. Every *_free accepts NULL.
 *
 * - Versioned structs. Every struct starts with `uint32_t struct_size`. Parameter structs are
 *   filled with defaults by their *_init(struct, sizeof(struct)) function, which records the
 *   size; the library then reads at most struct_size bytes, so a caller built against an older
 *   (shorter) version of a struct keeps working, and fields it does not know take their
 *   defaults. Output structs are written the same way: the caller sets struct_size (normally
 *   sizeof) and the library writes at most that many bytes. A struct_size smaller than the
 *   version-0 layout is PULSE_INVALID_ARGUMENT; a larger one is accepted and the unknown tail is
 *   ignored (init zeroes it). Structs only ever grow at the end.
 *
 * - Out-parameters. On error, an out-pointer that was given is set to NULL / 0 unless its
 *   function says otherwise, and no object is created or changed.
 *
 * - Output buffers (the size-query convention). A function that writes a variable amount of
 *   tokens or text into a caller's buffer takes (buffer, capacity, out_size). When the result
 *   does not fit, nothing is written to the buffer, *out_size is the size needed, and the status
 *   is PULSE_BUFFER_TOO_SMALL; so a call with (NULL, 0) asks for the size. Text is written with a
 *   terminating NUL that capacity must include (*out_size does not count it).
 *
 * - Text is UTF-8 and passed with its length in bytes; it need not be NUL-terminated unless a
 *   comment says so. Any bytes are accepted.
 *
 * - Threads. Functions may be called from any thread unless their comment says otherwise.
 *   Token callbacks run on the thread that calls pulse_engine_step (or pulse_engine_run), one at
 *   a time, with no library lock held. pulse_request_cancel and pulse_request_release called on
 *   another thread wait for a callback of their request that is running (see
 *   pulse_token_callback).
 */
#ifndef PULSEINFER_PULSEINFER_H_
#define PULSEINFER_PULSEINFER_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define PULSE_API __attribute__((visibility("default")))
#else
#define PULSE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes; pulse_abi_version() is the library's. They must be
 * equal (the shared library's SONAME carries it: libpulseinfer.so.0). */
#define PULSE_ABI_VERSION 0

/* ---- status ------------------------------------------------------------------------------ */

typedef int32_t pulse_status;

enum pulse_status_code {
  PULSE_OK = 0,
  /* Recoverable (> 0). */
  PULSE_NO_CAPACITY = 1, /* the engine cannot take this work now; step, then retry */
  PULSE_CANCELLED = 2,   /* the request was cancelled; its tokens so far are still readable */
  PULSE_AGAIN = 3,       /* the request is not finished yet; step, then ask again */
  PULSE_BUFFER_TOO_SMALL =
      4, /* an output buffer is too small: only the size it needs was written */
  /* Errors (< 0). */
  PULSE_INVALID_ARGUMENT = -1,    /* a NULL, out-of-range or inconsistent argument */
  PULSE_NOT_FOUND = -2,           /* no such file, request id, or tensor */
  PULSE_IO = -3,                  /* a file exists but cannot be read */
  PULSE_INVALID_MODEL = -4,       /* the file is not a model this library can read, or corrupt */
  PULSE_UNSUPPORTED = -5,         /* valid, but not supported by this build or backend */
  PULSE_OUT_OF_MEMORY = -6,       /* memory or KV capacity that can never be enough */
  PULSE_FAILED_PRECONDITION = -7, /* the object is in the wrong state for the call */
  PULSE_INTERNAL = -8             /* a bug in the library; the message says where */
};

/* A static, human-readable name of a status code ("invalid argument"); never NULL. */
PULSE_API const char* pulse_status_string(pulse_status status);

/* The message of the most recent non-OK status returned to the calling thread (thread-local;
 * other threads have their own). Empty when there was none. Never NULL. Valid until the next
 * call into the library on this thread; copy it to keep it. */
PULSE_API const char* pulse_last_error(void);

/* ---- library --------------------------------------------------------------------------- */

/* The library version, "MAJOR.MINOR.PATCH"; static, never NULL. */
PULSE_API const char* pulse_version(void);
/* The library's ABI version; compare with PULSE_ABI_VERSION. */
PULSE_API int32_t pulse_abi_version(void);

#define PULSE_FEATURE_CPU ((uint64_t)1 << 0)           /* the CPU backend is built */
#define PULSE_FEATURE_CUDA_COMPILED ((uint64_t)1 << 1) /* the CUDA backend is built */
#define PULSE_FEATURE_CUDA_DEVICE ((uint64_t)1 << 2)   /* and a CUDA device is present */

/* A bit set of PULSE_FEATURE_*. Unknown bits may appear in later versions; ignore them. */
PULSE_API uint64_t pulse_features(void);

/* ---- model ------------------------------------------------------------------------------ */

typedef struct pulse_model pulse_model;

typedef struct pulse_model_params {
  uint32_t struct_size;
  /* CPU threads for the model's backend, including the calling thread; 0 (default): one per
   * hardware core. */
  int32_t threads;
  /* "auto" (default; CUDA when built and a device is present, else CPU), "cpu", "cuda".
   * NULL means "auto". */
  const char* backend;
  /* How weights are stored on the backend: "auto" (default: quantized on the CPU, bf16 on
   * CUDA), "f32", "bf16", or "quantized": matrices a GGUF file stores in Q8_0, Q4_0, Q4_1, Q4_K
   * or Q6_K stay in those blocks where the backend computes on them (the CPU backend; the
   * 32-value types give the f32 weights' results bit for bit), the rest f32 on the CPU and bf16
   * on CUDA. NULL means "auto". */
  const char* weight_type;
  /* Seed of the random weights (used only when random_weights is nonzero). Default 0. */
  uint64_t random_seed;
  /* Cap on the backend memory (weights plus KV cache) in bytes; 0 (default): no cap. */
  uint64_t memory_limit_bytes;
  /* Nonzero: the load path names a Hugging Face config.json (or its directory), and the
   * weights are seeded random values at that config's real shapes. Default 0. */
  int32_t random_weights;
  /* Tensor parallelism: the model split over this many ranks, each with its KV heads' share of
   * every layer (whole groups of query heads) and the matching rows of each matrix, its own KV
   * cache and offload tiers, and engines over it give the one-rank model's tokens. On the CPU a
   * rank is a group of threads/ranks threads (at least one) with memory_limit_bytes each; CUDA
   * ranks (a GPU each) are not in this build (PULSE_UNSUPPORTED). The KV heads, the hidden and
   * intermediate sizes and the vocabulary must divide by it (else PULSE_INVALID_ARGUMENT). An
   * engine's sizes (KV capacity, offload tiers, memory) are each rank's, and its transfer and
   * selection statistics rank 0's, of rank 0's KV heads.
   * 0 (default) or 1: one rank. 64 bits wide so that it lies past the version-0 struct's tail
   * padding, which its callers' struct_size covers with bytes they never set. */
  int64_t tensor_parallel_size;
} pulse_model_params;

/* Fills `params` with the defaults and sets params->struct_size = struct_size (pass
 * sizeof(*params)). PULSE_INVALID_ARGUMENT when params is NULL or struct_size is smaller than
 * the version-0 struct; then nothing is written. */
PULSE_API pulse_status pulse_model_params_init(pulse_model_params* params, size_t struct_size);

/* Loads a model: a GGUF file, a Hugging Face directory (config.json plus model.safetensors or
 * a sharded index), or random weights (params->random_weights). The format is detected from the
 * content. `params` may be NULL for the defaults; the library does not keep it (the strings
 * may be freed when the call returns). On success *out_model is a new handle holding one
 * reference; release it with pulse_model_free. Errors: PULSE_NOT_FOUND (no such file),
 * PULSE_IO, PULSE_INVALID_MODEL (not a model, corrupt, inconsistent shapes), PULSE_UNSUPPORTED
 * (an architecture, tensor type or backend this build lacks), PULSE_OUT_OF_MEMORY,
 * PULSE_INVALID_ARGUMENT; *out_model is then NULL. Loading may take seconds; it runs on the
 * calling thread. Files are read while the call runs and not after it returns (truncating or
 * replacing them then changes nothing); they are mapped into memory meanwhile, so a file that
 * shrinks during the load ends the process with SIGBUS, as with any reader that maps files.
 * Files that are not regular files (FIFOs, devices) are refused before anything is read. */
PULSE_API pulse_status pulse_model_load(const char* path, const pulse_model_params* params,
                                        pulse_model** out_model);

/* Adds a reference to `model` and returns it (NULL for NULL). Thread-safe. */
PULSE_API pulse_model* pulse_model_retain(pulse_model* model);

/* Drops one reference; the model is destroyed with its last reference. NULL is a no-op.
 * Engines hold their own reference, so a model may be freed while engines still run it.
 * Thread-safe; the handle must not be used by the caller after its last reference is gone. */
PULSE_API void pulse_model_free(pulse_model* model);

typedef struct pulse_model_info {
  uint32_t struct_size;
  int32_t num_layers;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t hidden_size;
  int32_t intermediate_size;
  int32_t vocab_size;
  int32_t context_length;      /* the longest context the model supports */
  int32_t tie_word_embeddings; /* 1 when the output projection is the embedding table */
  int64_t parameter_count;     /* tied embeddings counted once */
  /* NUL-terminated strings owned by the model handle, valid until its last pulse_model_free
   * (the reference an engine holds does not keep them). */
  const char* architecture; /* "llama", "mistral", "qwen2" */
  const char* format;       /* "gguf", "safetensors", "random" */
  const char* stored_type;  /* the file's type holding most weights: "Q4_1", "bf16"... */
  const char* weight_type;  /* as stored on the backend: "f32", "bf16", "quantized" */
  const char* backend;      /* "cpu", "cuda" */
  /* The tokenizer's special tokens, -1 when it has none (or there is no tokenizer). */
  int32_t bos_token;
  int32_t eos_token;
  /* "gpt2" (byte-level BPE), "llama" (SentencePiece-style BPE), or "" when the model has no
   * tokenizer (random weights; then the text functions return PULSE_UNSUPPORTED). */
  const char* tokenizer;
  /* The chat template's family as recognised ("chatml", "qwen2.5", "llama3", "llama3.1",
   * "mistral", "mistral-v3"), or "" when the model has none or it is not one this library renders
   * (pulse_chat_apply_template says which). */
  const char* chat_template;
  /* The ranks the model is split over (pulse_model_params.tensor_parallel_size; 1 for one); the
   * sizes above are the whole model's. */
  int32_t tensor_parallel_size;
} pulse_model_info;

/* Describes `model`. The caller sets info->struct_size; the library writes at most that many
 * bytes (it keeps struct_size). Thread-safe. */
PULSE_API pulse_status pulse_model_info_get(const pulse_model* model, pulse_model_info* info);

/* ---- engine ----------------------------------------------------------------------------- */

typedef struct pulse_engine pulse_engine;

/* The KV block size an engine takes for pulse_engine_params.block_tokens 0 (the default): with
 * offload, blocks small enough to select what attention needs at a sixteenth of the context;
 * without, longer ones, whose runs of keys dense attention reads faster. */
#define PULSE_OFFLOAD_BLOCK_TOKENS 4
#define PULSE_DENSE_BLOCK_TOKENS 8

typedef struct pulse_engine_params {
  uint32_t struct_size;
  int32_t max_batch;       /* sequences in one step; default 16 */
  int32_t prefill_chunk;   /* prompt tokens of one request in one step; default 256 */
  int32_t max_step_tokens; /* tokens (prefill plus decode) in one step; default 512 */
  /* Tokens of one KV block, the unit offload selects; 0 (default): PULSE_OFFLOAD_BLOCK_TOKENS
   * with offload_mode on, PULSE_DENSE_BLOCK_TOKENS off */
  int32_t block_tokens;
  int32_t max_context; /* prompt plus generated tokens; 0 (default): the model's context */
  /* KV cache size in tokens; 0 (default): 8 full contexts, capped at 70% of the free memory of
   * the backend (the GPU's, or what pulse_model_params.memory_limit_bytes leaves), or at 1 GiB of
   * KV on the CPU without a memory limit */
  int64_t kv_capacity_tokens;
  /* Offloaded sparse decode attention (fields appended after version 0). With
   * PULSE_OFFLOAD_HEADWISE or PULSE_OFFLOAD_SOLOHEAD, every decode step attends, in each layer,
   * only to the attention-sink blocks, the recent window and the blocks whose key summaries
   * score highest against the query, within offload_budget_tokens (a summary keeps, for each
   * KV head, the per-channel min/max of boxes of consecutive keys: offload_summary_boxes,
   * offload_summary_radius and offload_summary_precision say how); prompt chunks stay dense.
   * SoloHead picks one block set a layer for all KV heads (a recalled block is one contiguous
   * copy), HeadWise one a KV head (per-head fragments). Every full block is written once to the
   * host tier; a decoding request keeps only its sinks, window and the block being written in the
   * KV cache (kv_capacity_tokens), and the blocks a step selects are recalled into the device
   * tier's slots, where they stay cached across steps. */
  int32_t offload_mode;          /* PULSE_OFFLOAD_OFF (default), _HEADWISE or _SOLOHEAD */
  int32_t offload_budget_tokens; /* tokens attended at most, sinks and window included; 2048 */
  int32_t offload_sink_tokens;   /* the first tokens, always attended; default 4 */
  int32_t offload_window_tokens; /* the last tokens, always attended; default 16 */
  /* (With no sink and no window the budget must reach block_tokens, else a step could attend to
   * nothing: PULSE_INVALID_ARGUMENT.) */
  /* Fields appended after version 1. */
  int32_t offload_executor; /* PULSE_COPY_AUTO (default), _GATHER, _BATCH_DMA, _PER_CHUNK */
  int32_t offload_eviction; /* PULSE_EVICT_LRU (default) or PULSE_EVICT_SCORE */
  /* Host-tier capacity in tokens (of every layer); 0 (default): 8 full contexts, at most 4 GiB.
   * Every host-tier block keeps its summary in device memory (at the default estimator about 14%
   * of its bf16 KV bytes at head_dim 64, 13% at 128), counted in the KV cache's default share. */
  int64_t offload_host_tokens;
  /* Device-tier slots in tokens; a decoding request's budget takes up to budget/block_tokens of
   * them at once. 0 (default): max_batch budgets, at most 1 GiB */
  int64_t offload_slot_tokens;
  /* Fields appended after version 2. */
  /* 1 (default): on a backend with graphs (CUDA), replay each decode step (one token a request,
   * dense attention) as one graph launch per batch shape, captured the second time the shape
   * runs; the results are the same. 0: launch every op of every step. */
  int32_t decode_graphs;
  /* Fields appended after version 3. */
  /* How a box of a block's key summary scores against a query, in [0, 1]: with each channel's
   * key range in the box shrunk to this fraction of its half-width around its midpoint, the sum
   * over channels of the larger of q*min and q*max. 1 is Quest's upper bound of q.k over the
   * box; 0 (default) the q.k of the range's center, which picks blocks closer to dense
   * attention's (the accuracy report in samples/bench/results). */
  double offload_summary_radius;
  /* Fields appended after version 4. */
  /* Boxes of consecutive tokens a block's key summary keeps a KV head; a block scores as its
   * best box. 0 (default): one box a token (every key scored exactly, the block's best kept); 1:
   * one box a block (Quest's page summary); otherwise a divisor of block_tokens. More boxes
   * select closer to dense attention for more summary memory. */
  int32_t offload_summary_boxes;
  /* How summaries are stored: PULSE_SUMMARY_F32, _BF16, _INT8 or _INT4 (default; a scale a row;
   * int4 needs an even head_dim, as rotary embeddings do). Every backend stores a box as one row at
   * radius 0 (its center), two otherwise, at this precision: fewer bytes to keep and read, for a
   * slightly coarser selection. */
  int32_t offload_summary_precision;
  /* Fields appended after version 5. */
  /* How an offloading engine places each request that takes its offloading (a request that asks
   * for a mode or a budget of its own runs as it asks): PULSE_ADMIT_IO_ADAPTIVE (default) runs it
   * resident, attended densely with its whole KV reserved in the KV cache, while it fits there
   * with room left for the resident set (sinks, window) of an offloaded request like it (when
   * max_batch allows another); otherwise offloaded, while the predicted recall time of a decode
   * step with it stays within the step's measured compute time; otherwise it waits. So at a load
   * that fits the KV cache nothing is offloaded. PULSE_ADMIT_OFFLOAD_EVERY offloads every such
   * request. Under PULSE_ADMIT_IO_ADAPTIVE a running request may change placement: a decoding
   * resident request is demoted (its sinks and window stay, the rest moves to the host tier) when
   * a waiting request's prompt does not fit, and an offloaded one promoted back when nothing
   * waits, its worst case fits and the recall it would still cost outweighs copying its context
   * back; each at most once. */
  int32_t offload_admission;
  /* The device memory the KV may use in all, in bytes, when kv_capacity_tokens is 0: with
   * offloading, the device slots, the summaries of the host tier's blocks and the staging area of
   * a prompt prefilled staged come first, and the KV cache gets the rest; ResourceExhausted when
   * nothing is left. 0 (default): no such cap. Not with kv_capacity_tokens. */
  int64_t kv_memory_bytes;
  /* For benchmarks of recall: in (0, 1), offloaded decode steps pick blocks drawn at random
   * (seeded, the same every run) so that about this share of a step's picks stays picked the
   * next step, instead of the blocks their summaries score highest; scoring, selection, tables
   * and recall run as they would. A trained model keeps 0.82 to 0.92 of its picks, random
   * weights far fewer. Tokens are then not the model's. 0 (default): picks by score. */
  double offload_synthetic_reuse;
  /* Fields appended after version 6. */
  /* The micro-batches a decode step runs as, their layers interleaved so that one's recall
   * lands while another computes: 0 (default) chosen each step, one unless an offloading
   * engine's recall would take at least a quarter of the step's compute time, then two or one,
   * whichever the engine has measured faster; 1 to 8: every decode step of at least that many
   * requests. The CPU backend gives the same tokens for any count; on CUDA a split step's GEMMs
   * may round differently. */
  int32_t micro_batches;
  /* Fields appended after version 7. */
  /* 1 (default): the blocks an offloaded request stops keeping resident (its prompt's, when it
   * starts decoding, then each block that leaves its window) are also copied into the device
   * slots that are free, so that its first picks of them are hits; they are the first to be
   * evicted. 0: only the host tier keeps them, and every first pick of one is recalled. */
  int32_t offload_fill_free_slots;
  /* Fields appended after version 8. */
  /* Under PULSE_ADMIT_IO_ADAPTIVE, the least budget in tokens (at most offload_budget_tokens)
   * that admission may give a request the engine places when a decode step with it at
   * offload_budget_tokens would recall past the step's compute time: the budget halves until the
   * predicted recall keeps up, down to this one, and the request runs with it instead of
   * waiting. More requests run, each attending fewer tokens; which budget a request gets then
   * depends on the measured rates (pulse_engine_stats.lowered_budgets counts them). 0
   * (default): budgets are never lowered. */
  int32_t offload_min_budget_tokens;
  /* Fields appended after version 9. */
  /* How the host tier stores offloaded blocks (pulse_host_codec_code): PULSE_HOST_CODEC_RAW
   * (default) as the device holds them; PULSE_HOST_CODEC_FP8 as fp8 E4M3 with a scale per KV
   * head's keys or values, half a bf16 block's host memory and recall (a quarter of an f32
   * block's), decoded as it is recalled; selection scores the exact keys. Attention then reads
   * recalled blocks to fp8's precision, and tokens may differ from the raw tier's. */
  int32_t offload_host_codec;
  /* Fields appended after version 10. */
  /* Prefix caching of the host tier, 1 on, 0 (default) off: once a request has decoded a step,
   * its prompt's full blocks stay in the host tier named by their tokens (a resident request's
   * copied there, when the host tier has room); an offloaded request whose prompt starts with
   * cached blocks holds the same copies (counted once), skips their prefill and prefills the rest
   * from the host tier; cached blocks no request holds stay until the host tier needs their
   * room, the least recently released first. A request the engine places runs offloaded when its
   * prompt starts with a cached block. The tokens are those of the request prefilled on its own
   * (pulse_engine_stats.prefix_hits, prefix_hit_tokens, host_blocks_cached). */
  int32_t offload_prefix_cache;
} pulse_engine_params;

enum pulse_offload_mode_code {
  PULSE_OFFLOAD_ENGINE = -1, /* a request: as its engine */
  PULSE_OFFLOAD_OFF = 0,
  PULSE_OFFLOAD_HEADWISE = 1,
  PULSE_OFFLOAD_SOLOHEAD = 2
};

/* How recalled blocks move from the host tier to the device (the CPU backend copies on a thread
 * whatever is chosen). */
enum pulse_copy_executor_code {
  PULSE_COPY_AUTO = 0,      /* gather below 64 KiB a chunk on average, batch DMA above */
  PULSE_COPY_GATHER = 1,    /* a kernel on a few SMs reading mapped host memory */
  PULSE_COPY_BATCH_DMA = 2, /* one cudaMemcpyBatchAsync */
  PULSE_COPY_PER_CHUNK = 3  /* one cudaMemcpyAsync a chunk (the baseline) */
};

/* How the host tier stores offloaded blocks (pulse_engine_params.offload_host_codec). */
enum pulse_host_codec_code {
  PULSE_HOST_CODEC_RAW = 0, /* the device's form */
  PULSE_HOST_CODEC_FP8 = 1  /* fp8 E4M3, a scale per KV head's keys or values */
};

/* Which cached block leaves the device tier when a recalled one needs its slot. */
enum pulse_eviction_code {
  PULSE_EVICT_LRU = 0,  /* least recently selected */
  PULSE_EVICT_SCORE = 1 /* lowest latest selection score */
};

/* How block summaries are stored (pulse_engine_params.offload_summary_precision). */
enum pulse_summary_precision_code {
  PULSE_SUMMARY_F32 = 0,
  PULSE_SUMMARY_BF16 = 1,
  PULSE_SUMMARY_INT8 = 2, /* a scale a row */
  PULSE_SUMMARY_INT4 = 3  /* 4-bit, two a byte, a scale a row */
};

/* How an offloading engine places requests (pulse_engine_params.offload_admission). */
enum pulse_admission_code {
  PULSE_ADMIT_IO_ADAPTIVE = 0, /* resident while it fits, offloaded while recall keeps up */
  PULSE_ADMIT_OFFLOAD_EVERY = 1
};

/* Fills `params` with the defaults; see pulse_model_params_init for the rules. */
PULSE_API pulse_status pulse_engine_params_init(pulse_engine_params* params, size_t struct_size);

/* Creates an engine over `model`, which gains a reference held until pulse_engine_free (the
 * caller keeps its own). `params` may be NULL for the defaults. The KV cache is allocated now:
 * PULSE_OUT_OF_MEMORY when it does not fit. On error *out_engine is NULL. */
PULSE_API pulse_status pulse_engine_create(const pulse_model* model,
                                           const pulse_engine_params* params,
                                           pulse_engine** out_engine);

/* Destroys the engine, its requests and their results, and drops its model reference. NULL is
 * a no-op. Must not run concurrently with any other call on this engine, nor from a token
 * callback. */
PULSE_API void pulse_engine_free(pulse_engine* engine);

typedef struct pulse_step_report {
  uint32_t struct_size;
  int32_t scheduled;      /* sequences in this step */
  int32_t prefill_tokens; /* prompt tokens processed in this step */
  int32_t decode_tokens;  /* tokens generated in this step */
  int32_t pending;        /* requests still queued or running after the step */
} pulse_step_report;

/* Runs one step on the calling thread: admits queued requests whose KV fits, then one forward
 * pass over the batch, then delivers the new tokens to the callbacks (on this thread, no lock
 * held). A concurrent second call waits for the first. `report` may be NULL; when given, the
 * caller sets report->struct_size and the step's figures are written. Called from a token
 * callback it returns PULSE_FAILED_PRECONDITION and changes nothing. A step with nothing pending
 * does nothing and reports pending = 0. */
PULSE_API pulse_status pulse_engine_step(pulse_engine* engine, pulse_step_report* report);

/* Steps until no request is queued or running. Same rules as pulse_engine_step; stops at the
 * first failing step and returns its status (PULSE_INTERNAL for a step that schedules nothing
 * while requests are pending, which would otherwise loop forever). */
PULSE_API pulse_status pulse_engine_run(pulse_engine* engine);

typedef struct pulse_engine_stats {
  uint32_t struct_size;
  int64_t steps;             /* steps that ran a forward pass */
  int64_t prefill_tokens;    /* prompt tokens computed */
  int64_t decode_tokens;     /* generated tokens fed back into the model */
  int64_t generated_tokens;  /* tokens sampled */
  int64_t finished_requests; /* requests that finished, for any reason */
  int32_t queued;            /* requests waiting now */
  int32_t running;           /* requests in the batch now */
  int32_t kv_blocks;         /* blocks of the KV cache */
  int32_t kv_blocks_in_use;  /* blocks allocated or reserved by running requests */
  /* Sparse decode attention, totals over every (request, layer, step, block set) selection. */
  int64_t sparse_selections;
  int64_t sparse_candidate_blocks; /* blocks scored */
  int64_t sparse_picked_blocks;    /* of them, selected */
  int64_t sparse_reused_blocks;    /* of those, also selected by the same set the step before */
  int64_t sparse_attended_tokens;  /* tokens the sparse rows attended to */
  int64_t sparse_context_tokens;   /* tokens they would have attended to densely */
  /* Offloaded KV (fields appended after version 1): capacities and use now, then totals. */
  int32_t host_blocks;        /* blocks of the host tier */
  int32_t host_blocks_in_use; /* reserved by running requests */
  int32_t slot_blocks;        /* device-tier slots */
  int32_t slot_blocks_in_use; /* reserved by running requests' budgets */
  int64_t recall_bytes;       /* moved host -> device */
  int64_t recall_transfers;   /* contiguous chunks moved (a block, or a head's K or V) */
  int64_t recall_plans;       /* (step, layer) recalls enqueued (with or without misses) */
  double recall_ms;           /* the copy engine's time on them; / steps: per step */
  int64_t writeback_bytes;    /* moved device -> host, each full block once a layer */
  int64_t slot_hits;          /* selected blocks found in a slot */
  int64_t slot_misses;        /* selected blocks recalled */
  int64_t slot_evictions;     /* cached blocks a recall displaced */
  /* Fields appended after version 3. */
  /* Host time planning the steps' sparse selection (each request's candidates and tables'
   * inputs, uploaded once a step; selection itself runs on the device, which does not wait for
   * the host inside a step); / steps: per step. */
  double selection_ms;
  /* Fields appended after version 4. */
  /* Times the host waited for the device inside steps, besides reading each step's tokens (or
   * logits) and the counters that come back with them: 0 when the device drives every step; /
   * steps: per step. */
  int64_t host_waits;
  /* Fields appended after version 5: placement (pulse_engine_params.offload_admission). */
  int64_t admitted_resident;  /* requests admitted resident (dense) by an offloading engine */
  int64_t admitted_offloaded; /* requests admitted offloaded */
  int64_t admission_io_waits; /* admissions where the queue's head waited for recall I/O */
  /* The rates placement predicts from, averaged over recent decode steps with offloaded rows
   * (0 before the first): the recall link's rate, recall bytes an offloaded row costs a step,
   * and a step's time less the copy engine's time on its recalls; then the recall time they
   * predict for a step of the offloaded requests running now. */
  double link_gb_s;
  double recall_mb_per_row;
  double step_compute_ms;
  double predicted_recall_ms;
  int32_t running_offloaded; /* offloaded requests running now */
  /* Device bytes of the KV: the KV cache's blocks and slots and, when offloading, the summaries
   * of the host tier's blocks and the staging area. */
  int64_t kv_memory_bytes;
  /* Fields appended after version 6: layer-wise scheduling (pulse_engine_params.micro_batches). */
  int64_t split_steps;   /* decode steps run as several micro-batches */
  int64_t probe_steps;   /* eligible steps the adaptive choice ran against its preference */
  int32_t micro_batches; /* the last step's */
  /* Placement changes of running requests under PULSE_ADMIT_IO_ADAPTIVE: resident requests
   * offloaded when the KV cache could not hold a waiting request's prompt, and offloaded ones
   * made resident again when memory freed (each request moves at most once each way). */
  int64_t demoted_requests;
  int64_t promoted_requests;
  /* Steps that failed as a whole (a copy that failed, the device tier exhausted in the middle of
   * the step) and ran once more from the same inputs; a second failure fails the step's
   * requests, with its status, and the engine serves on. */
  int64_t retried_steps;
  /* Offloaded requests whose prompt the KV cache could not hold, prefilled staged: a chunk reads
   * the earlier chunks' KV from the host tier a layer at a time, so the device holds two layers
   * of the prompt beside its sinks and window; and the bytes those chunks recalled. */
  int64_t staged_requests;
  int64_t staged_recall_bytes;
  /* Offloaded requests admitted with a budget below the engine's
   * (pulse_engine_params.offload_min_budget_tokens). */
  int64_t lowered_budgets;
  /* Fields appended after version 10: prefix caching (pulse_engine_params.offload_prefix_cache).
   * Offloaded requests admitted with cached blocks at the start of their prompt, the prompt
   * tokens those blocks spared prefill, and the host-tier blocks cached now (held by running
   * requests or not; those no request holds count as free in host_blocks_in_use). */
  int64_t prefix_hits;
  int64_t prefix_hit_tokens;
  int32_t host_blocks_cached;
} pulse_engine_stats;

/* Totals since the engine was created, and its state now. The caller sets stats->struct_size;
 * the library writes at most that many bytes. May be called from any thread, also while a step
 * runs (the figures are then those before or after the step). */
PULSE_API pulse_status pulse_engine_stats_get(pulse_engine* engine, pulse_engine_stats* stats);

/* ---- requests --------------------------------------------------------------------------- */

typedef struct pulse_sampling_params {
  uint32_t struct_size;
  /* 0 is greedy (argmax, lowest id on ties); otherwise repetition penalty, temperature, top-k,
   * top-p and min-p filter in that order and a token is drawn with a generator seeded by
   * `seed` (same seed, same tokens). */
  float temperature;        /* >= 0; default 1 */
  float top_p;              /* in (0, 1]; 1 (default) is off */
  float min_p;              /* in [0, 1]; 0 (default) is off */
  float repetition_penalty; /* > 0; 1 (default) is off; applies to prompt and generated tokens */
  int32_t top_k;            /* >= 0; 0 (default) is off */
  int32_t max_tokens;       /* tokens to generate, >= 1; default 128 */
  int32_t ignore_eos;       /* nonzero: the model's end-of-sequence tokens do not stop */
  uint64_t seed;            /* default 0 */
  /* Extra stop tokens (the sampled stop token is part of the output). Copied at submit; NULL
   * when stop_token_count is 0. */
  const int32_t* stop_token_ids;
  size_t stop_token_count;
  /* Stop strings (need the model's tokenizer, else PULSE_FAILED_PRECONDITION at submit): the
   * generation ends as soon as its text contains one, and the text ends just before it
   * (PULSE_FINISH_STOP_STRING); a stop string split across tokens is caught, and no part of it
   * reaches a token event. The tokens that formed it stay in the token results. NUL-terminated,
   * non-empty, copied at submit; NULL when stop_string_count is 0. */
  const char* const* stop_strings;
  size_t stop_string_count;
  /* The request's own offloading (fields appended after version 1), within the engine's
   * (pulse_engine_params.offload_*): PULSE_OFFLOAD_ENGINE (default) as the engine does;
   * PULSE_OFFLOAD_OFF dense (its whole context stays in the KV cache); or the engine's own mode
   * (another one is PULSE_INVALID_ARGUMENT). The sizes override the engine's when set; asking an
   * engine without offloading for them is PULSE_FAILED_PRECONDITION at submit. */
  int32_t offload_mode;
  int32_t offload_budget_tokens; /* 0 (default): the engine's */
  int32_t offload_sink_tokens;   /* -1 (default): the engine's */
  int32_t offload_window_tokens; /* -1 (default): the engine's */
} pulse_sampling_params;

/* Fills `params` with the defaults; see pulse_model_params_init for the rules. */
PULSE_API pulse_status pulse_sampling_params_init(pulse_sampling_params* params,
                                                  size_t struct_size);

typedef int32_t pulse_request_state;
enum pulse_request_state_code {
  PULSE_REQUEST_QUEUED = 0,  /* waiting for a batch slot or KV capacity (a wait, not an error) */
  PULSE_REQUEST_RUNNING = 1, /* in the batch: prefilling or decoding */
  PULSE_REQUEST_FINISHED = 2 /* done; see its finish reason */
};

typedef int32_t pulse_finish_reason;
enum pulse_finish_reason_code {
  PULSE_FINISH_NONE = 0,       /* not finished */
  PULSE_FINISH_MAX_TOKENS = 1, /* generated max_tokens */
  PULSE_FINISH_STOP_TOKEN = 2, /* sampled a stop or end-of-sequence token (it is in the output) */
  PULSE_FINISH_CONTEXT = 3,    /* reached the engine's max_context */
  PULSE_FINISH_CANCELLED = 4,  /* pulse_request_cancel or a callback's nonzero return */
  PULSE_FINISH_CAPACITY = 5,   /* can never fit the KV cache */
  PULSE_FINISH_ERROR = 6,      /* failed; pulse_request_stats gives the status */
  PULSE_FINISH_STOP_STRING = 7 /* its text reached a stop string (which is not in the text) */
};

/* A static name of a finish reason ("max_tokens", "stop_token"...); never NULL. */
PULSE_API const char* pulse_finish_reason_string(pulse_finish_reason reason);

/* One event per generated token, index 0, 1, 2...; the last has finished = 1 and its reason
 * (MAX_TOKENS, STOP_TOKEN or CONTEXT). A request that fails gets one last event with token -1,
 * finished = 1 and PULSE_FINISH_ERROR. An event is delivered only if, when its callback is
 * called, its request still exists (was not released) and pulse_request_cancel was never called
 * on it (a nonzero return of its callback counts as a cancel): so once a request is cancelled or
 * released it gets no further events, not even one already generated in the step in flight, its
 * finished event included. */
typedef struct pulse_token_event {
  uint32_t struct_size; /* of the library's struct: fields past it are absent */
  int32_t token;        /* -1 on an error event */
  uint64_t request_id;
  int32_t index;                     /* 0 for the first generated token */
  int32_t finished;                  /* 1 on the request's last event */
  pulse_finish_reason finish_reason; /* PULSE_FINISH_NONE unless finished */
  /* The text this token adds to the request's text (NULL and 0 when the engine's model has no
   * tokenizer). It holds only whole UTF-8 characters, so it may be empty: half a character, a
   * control token (<|im_end|> renders nothing), or text that may begin a stop string waits for
   * the next event; the last event carries what was held back. The concatenated texts of a
   * request equal pulse_detokenize of its tokens (up to a stop string). text[text_len] is a NUL.
   * Read these fields only when struct_size covers them. */
  const char* text;
  size_t text_len;
} pulse_token_event;

/* Receives each generated token. Runs on the thread calling pulse_engine_step, one callback at a
 * time, with no library lock held: it may call pulse_request_cancel, pulse_request_release,
 * pulse_request_submit, pulse_request_poll and the other request functions on the same engine,
 * for its own request or another, but not pulse_engine_free (pulse_engine_step and
 * pulse_engine_run return PULSE_FAILED_PRECONDITION there). `event` is valid only during the
 * call. A nonzero return cancels the
 * request (no further events). It must not throw or longjmp across the library.
 *
 * Lifetime: pulse_request_cancel and pulse_request_release called on another thread do not
 * return while the callback of their request runs; once they have returned PULSE_OK, that
 * callback is not running and is never called again for that request, so its user_data may be
 * freed. Called from within a callback (on its own request or another), they return without
 * waiting; a callback that cancels or releases its own request finishes that call and gets no
 * further one. So a callback must never wait for a thread that cancels or releases the callback's
 * own request: that thread waits for the callback, and neither returns. */
typedef int (*pulse_token_callback)(void* user_data, const pulse_token_event* event);

/* Queues a generation request for the prompt `tokens` [count]. `sampling` may be NULL for the
 * defaults; `callback` may be NULL (then read tokens with pulse_request_poll). The prompt and
 * the stop tokens are copied; `user_data` is passed to the callback as is and must stay valid
 * until the first of: the return of the request's last event (finished = 1), or the return of a
 * pulse_request_cancel or pulse_request_release of the request that returned PULSE_OK (see
 * pulse_token_callback). Errors: PULSE_INVALID_ARGUMENT (empty
 * prompt, a token outside the vocabulary, sampling values out of range, a prompt of
 * max_context tokens or more), PULSE_OUT_OF_MEMORY (prompt plus max_tokens can never fit the KV
 * cache), PULSE_NO_CAPACITY (cannot queue now); then nothing is queued and *out_id is 0. */
PULSE_API pulse_status pulse_request_submit(pulse_engine* engine, const int32_t* tokens,
                                            size_t count, const pulse_sampling_params* sampling,
                                            pulse_token_callback callback, void* user_data,
                                            uint64_t* out_id);

/* As pulse_request_submit, for a prompt given as text: text[text_len] is encoded with the
 * model's tokenizer and `tokenize_flags` (PULSE_TOKENIZE_*; pass PULSE_TOKENIZE_DEFAULT for
 * plain text, and PULSE_TOKENIZE_PARSE_SPECIAL alone for the output of
 * pulse_chat_apply_template, which already holds the template's BOS text). Errors as
 * pulse_request_submit, and PULSE_UNSUPPORTED when the model has no tokenizer. */
PULSE_API pulse_status pulse_request_submit_text(pulse_engine* engine, const char* text,
                                                 size_t text_len, uint32_t tokenize_flags,
                                                 const pulse_sampling_params* sampling,
                                                 pulse_token_callback callback, void* user_data,
                                                 uint64_t* out_id);

/* Cancels a request: it leaves the batch before the next step and finishes with
 * PULSE_FINISH_CANCELLED; its tokens so far stay readable until it is released. When it already
 * finished, PULSE_OK and its state, finish reason and tokens stay as they are, but its events not
 * yet delivered (its finished event, when it finished in the step in flight) are dropped.
 * PULSE_NOT_FOUND for an unknown or released id. Called on another thread, it returns only when
 * the request's callback is not running; after PULSE_OK the callback is never called again (see
 * pulse_token_callback). */
PULSE_API pulse_status pulse_request_cancel(pulse_engine* engine, uint64_t id);

/* Reads the tokens generated since this request's previous poll, in order, at most `capacity`
 * of them into `tokens`; *out_count is how many were written (the rest wait for the next poll).
 * Size query: tokens NULL and capacity 0 writes the number of unread tokens to *out_count and
 * reads nothing. *out_state (may be NULL) is the request's state, except that a finished
 * request reads PULSE_REQUEST_RUNNING until every token has been read, so that polling until
 * PULSE_REQUEST_FINISHED reads them all.
 * Errors: PULSE_NOT_FOUND, PULSE_INVALID_ARGUMENT (tokens NULL with capacity > 0); nothing is
 * read then. Polls of one request from several threads at once each get distinct tokens. */
PULSE_API pulse_status pulse_request_poll(pulse_engine* engine, uint64_t id, int32_t* tokens,
                                          size_t capacity, size_t* out_count,
                                          pulse_request_state* out_state);

/* Copies every token the request generated so far, from the first, at most `capacity` into
 * `tokens` (NULL when capacity is 0); *out_count is the total number generated (so capacity 0
 * is a size query). Independent of polling. Returns PULSE_OK when the request finished normally
 * (max tokens, stop token, context), PULSE_CANCELLED when it was cancelled, PULSE_AGAIN while
 * it is queued or running (the tokens so far are still copied), the request's own error status
 * when it failed (PULSE_OUT_OF_MEMORY for PULSE_FINISH_CAPACITY), PULSE_NOT_FOUND for an
 * unknown id (then *out_count is 0). */
PULSE_API pulse_status pulse_request_result(pulse_engine* engine, uint64_t id, int32_t* tokens,
                                            size_t capacity, size_t* out_count);

/* Copies the request's text so far (the concatenated texts of its token events; see
 * pulse_token_event) into text[capacity] with a NUL; *out_len is its length. Output buffer
 * convention as described at the top (PULSE_BUFFER_TOO_SMALL). PULSE_OK whatever the request's
 * state (read it with pulse_request_stats_get); PULSE_NOT_FOUND for an unknown id,
 * PULSE_UNSUPPORTED when the engine's model has no tokenizer. */
PULSE_API pulse_status pulse_request_text(pulse_engine* engine, uint64_t id, char* text,
                                          size_t capacity, size_t* out_len);

typedef struct pulse_request_stats {
  uint32_t struct_size;
  pulse_request_state state;
  pulse_finish_reason finish_reason;
  int32_t prompt_tokens;
  int32_t generated_tokens;
  pulse_status error; /* the failure when finish_reason is ERROR or CAPACITY, else PULSE_OK */
  double queue_ms;    /* submit to first scheduled step */
  double ttft_ms;     /* submit to first generated token */
  double tpot_ms;     /* mean time between generated tokens after the first */
  double total_ms;    /* submit to finish (or to now) */
} pulse_request_stats;

/* Describes a request. The caller sets stats->struct_size; the library writes at most that many
 * bytes. PULSE_NOT_FOUND for an unknown id. */
PULSE_API pulse_status pulse_request_stats_get(pulse_engine* engine, uint64_t id,
                                               pulse_request_stats* stats);

/* Forgets a finished request and its tokens; its id is then unknown, and its events not yet
 * delivered (its finished event, when it finished in the step in flight) are dropped.
 * PULSE_FAILED_PRECONDITION while it is queued or running (cancel it first), PULSE_NOT_FOUND for
 * an unknown id. Called on another thread, it returns only when the request's callback is not
 * running; after PULSE_OK the callback is never called again, so its user_data may be freed (see
 * pulse_token_callback). */
PULSE_API pulse_status pulse_request_release(pulse_engine* engine, uint64_t id);

/* ---- text ------------------------------------------------------------------------------ */

/* Flags of pulse_tokenize and pulse_request_submit_text. */
#define PULSE_TOKENIZE_ADD_SPECIAL ((uint32_t)1 << 0) /* BOS (and EOS) as the tokenizer adds */
#define PULSE_TOKENIZE_PARSE_SPECIAL \
  ((uint32_t)1 << 1) /* "<|im_start|>" in the text is its token */
#define PULSE_TOKENIZE_DEFAULT (PULSE_TOKENIZE_ADD_SPECIAL | PULSE_TOKENIZE_PARSE_SPECIAL)

/* Encodes text[text_len] with the model's tokenizer into tokens[capacity]; *out_count is the
 * number of tokens (output buffer convention as described at the top). Any bytes are accepted:
 * a byte that begins no well-formed UTF-8 sequence is encoded on its own, as its byte-level
 * token ("gpt2") or its <0xAB> byte-fallback token ("llama"). pulse_detokenize gives back exactly
 * the bytes the vocabulary can represent, directly or through byte fallback; the rest is dropped,
 * as the Hugging Face tokenizers package drops it. For a byte-level vocabulary that is each byte
 * it has no token for: SmolLM2's lacks 21 of the 256 (among them 0x04, 0xC0, 0xF1 and 0xFF), so
 * such bytes are lost even from valid UTF-8. For a SentencePiece-style vocabulary it is each
 * character with neither a token of its own nor byte-fallback tokens for all its bytes; such a
 * character becomes the unknown token instead when the vocabulary has one (it decodes to that
 * token's text, such as "<unk>"). Besides, the text of a control token ("<|im_end|>"; parsed as
 * that token with PULSE_TOKENIZE_PARSE_SPECIAL) and the tokens PULSE_TOKENIZE_ADD_SPECIAL adds
 * decode to nothing without PULSE_DETOKENIZE_RENDER_SPECIAL, and a SentencePiece-style space
 * prefix can change a space at the start of the text or after special-token text. Errors:
 * PULSE_INVALID_ARGUMENT (NULL model or out_count, text NULL with text_len > 0, unknown flag
 * bits), PULSE_UNSUPPORTED (the model has no tokenizer); *out_count is 0 then. Thread-safe. */
PULSE_API pulse_status pulse_tokenize(const pulse_model* model, const char* text, size_t text_len,
                                      uint32_t flags, int32_t* tokens, size_t capacity,
                                      size_t* out_count);

/* Flags of pulse_detokenize. */
#define PULSE_DETOKENIZE_RENDER_SPECIAL ((uint32_t)1 << 0) /* control tokens as their text */

/* Decodes tokens[count] into text[capacity] with a NUL; *out_len is the text's length (output
 * buffer convention as described at the top). Control tokens (<|im_end|>, <s>) decode to nothing
 * unless PULSE_DETOKENIZE_RENDER_SPECIAL. Errors: PULSE_INVALID_ARGUMENT (a token outside the
 * vocabulary, NULL arguments, unknown flag bits), PULSE_UNSUPPORTED (no tokenizer); *out_len is
 * 0 then. Thread-safe. */
PULSE_API pulse_status pulse_detokenize(const pulse_model* model, const int32_t* tokens,
                                        size_t count, uint32_t flags, char* text, size_t capacity,
                                        size_t* out_len);

/* One message of a conversation. This struct is fixed: it will never grow. */
typedef struct pulse_chat_message {
  const char* role;    /* "system", "user" or "assistant"; NUL-terminated */
  const char* content; /* NUL-terminated */
} pulse_chat_message;

/* Formats messages[count] with the model's chat template (its tokenizer.chat_template) exactly
 * as the template renders them, into text[capacity] with a NUL; *out_len is the length (output
 * buffer convention as described at the top). A nonzero add_generation_prompt ends the text with
 * the assistant's header, ready to generate. Submit the result with pulse_request_submit_text and
 * PULSE_TOKENIZE_PARSE_SPECIAL. Errors: PULSE_NOT_FOUND (the model has no chat template),
 * PULSE_UNSUPPORTED (a template this library does not render: it renders ChatML and Qwen2.5,
 * Llama 3 and 3.1, and Mistral v0.1-v0.3, for conversations without tools; format the prompt
 * yourself and submit it as text), PULSE_INVALID_ARGUMENT (NULL role or content, a conversation the
 * template refuses, such as roles that do not alternate); *out_len is 0 then. Thread-safe. */
PULSE_API pulse_status pulse_chat_apply_template(const pulse_model* model,
                                                 const pulse_chat_message* messages, size_t count,
                                                 int32_t add_generation_prompt, char* text,
                                                 size_t capacity, size_t* out_len);

/* As pulse_request_submit, for a conversation: messages[count] formatted with the model's chat
 * template and its generation prompt (pulse_chat_apply_template), then encoded with
 * PULSE_TOKENIZE_PARSE_SPECIAL, so that the template's markers are its special tokens. Errors as
 * pulse_request_submit_text, and those of pulse_chat_apply_template (PULSE_NOT_FOUND: the model
 * has no chat template; PULSE_UNSUPPORTED: not one this library renders). */
PULSE_API pulse_status pulse_request_submit_chat(pulse_engine* engine,
                                                 const pulse_chat_message* messages, size_t count,
                                                 const pulse_sampling_params* sampling,
                                                 pulse_token_callback callback, void* user_data,
                                                 uint64_t* out_id);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PULSEINFER_PULSEINFER_H_ */
