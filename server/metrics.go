package main

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

// metrics are the server's Prometheus series: its own counts and latency histograms, and the
// engine's state and totals read at each scrape.
type metrics struct {
	requests atomic.Uint64 // generations admitted
	rejected atomic.Uint64 // refused with 429
	ttft     *histogram
	tpot     *histogram

	mu         sync.Mutex
	lastScrape time.Time
	lastTokens int64
}

func newMetrics() *metrics {
	return &metrics{
		ttft: newHistogram([]float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
		tpot: newHistogram([]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5}),
	}
}

// observe records a finished request's latencies.
func (m *metrics) observe(stats pulseinfer.RequestStats) {
	if stats.GeneratedTokens > 0 {
		m.ttft.observe(stats.TimeToFirst.Seconds())
	}
	if stats.GeneratedTokens > 1 {
		m.tpot.observe(stats.TimePerToken.Seconds())
	}
}

func (m *metrics) serve(engine *pulseinfer.Engine) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		stats, err := engine.Stats()
		if err != nil {
			writeError(w, submitError(err))
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		gauge := func(name, help string, value float64) {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", name, help, name, name, value)
		}
		counter := func(name, help string, value float64) {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %g\n", name, help, name, name, value)
		}
		gauge("pulseinfer_requests_running", "Requests in the engine's batch.", float64(stats.Running))
		gauge("pulseinfer_requests_waiting", "Requests queued for the batch.", float64(stats.Queued))
		gauge("pulseinfer_requests_offloaded", "Running requests whose KV is offloaded to the host.",
			float64(stats.RunningOffloaded))
		counter("pulseinfer_requests_total", "Generations admitted.", float64(m.requests.Load()))
		counter("pulseinfer_requests_rejected_total", "Requests refused past the concurrency bound.",
			float64(m.rejected.Load()))
		counter("pulseinfer_generated_tokens_total", "Tokens generated.", float64(stats.GeneratedTokens))
		gauge("pulseinfer_generated_tokens_per_second", "Tokens generated a second since the last scrape.",
			m.rate(stats.GeneratedTokens))
		counter("pulseinfer_recall_bytes_total", "KV bytes recalled from the host tier.",
			float64(stats.RecallBytes))
		hitRatio := 0.0
		if lookups := stats.SlotHits + stats.SlotMisses; lookups > 0 {
			hitRatio = float64(stats.SlotHits) / float64(lookups)
		}
		gauge("pulseinfer_slot_hit_ratio", "Offloaded picks found in a device slot.", hitRatio)
		counter("pulseinfer_prefix_cache_hits_total",
			"Requests admitted with cached blocks at the start of their prompt.",
			float64(stats.PrefixHits))
		counter("pulseinfer_prefix_cache_hit_tokens_total",
			"Prompt tokens whose prefill cached blocks spared.", float64(stats.PrefixHitTokens))
		gauge("pulseinfer_host_blocks_cached", "Host-tier blocks in the prefix cache.",
			float64(stats.HostBlocksCached))
		m.ttft.write(w, "pulseinfer_time_to_first_token_seconds", "Submit to the first token.")
		m.tpot.write(w, "pulseinfer_time_per_output_token_seconds",
			"Mean time between a request's tokens after the first.")
	}
}

// rate is the tokens a second since the previous scrape (0 at the first).
func (m *metrics) rate(tokens int64) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	rate := 0.0
	if !m.lastScrape.IsZero() {
		if seconds := now.Sub(m.lastScrape).Seconds(); seconds > 0 {
			rate = float64(tokens-m.lastTokens) / seconds
		}
	}
	m.lastScrape, m.lastTokens = now, tokens
	return rate
}

// histogram is a Prometheus histogram: cumulative bucket counts, their sum and count.
type histogram struct {
	mu      sync.Mutex
	bounds  []float64
	buckets []uint64 // observations <= bounds[i] (not cumulative)
	count   uint64
	sum     float64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, buckets: make([]uint64, len(bounds))}
}

func (h *histogram) observe(value float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, bound := range h.bounds {
		if value <= bound {
			h.buckets[i]++
			break
		}
	}
	h.count++
	h.sum += value
}

func (h *histogram) write(w io.Writer, name, help string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var cumulative uint64
	for i, bound := range h.bounds {
		cumulative += h.buckets[i]
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", name, bound, cumulative)
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, h.count, name,
		h.sum, name, h.count)
}
