package jwtbench

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// insertRoute is the route label of POST notification in the hub's metrics.
const insertRoute = "POST /api/rest/device/{id}/notification"

// HubWindow is what the hub did in a measured window (differences of its counters), in
// seconds and counts.
type HubWindow struct {
	Inserts   float64 `json:"inserts"`     // notification requests handled
	InsertSum float64 `json:"insert_s"`    // their handling time
	JWTCount  float64 `json:"jwt_count"`   // tokens verified
	JWTSum    float64 `json:"jwt_s"`       // their whole processing
	SigSum    float64 `json:"signature_s"` // their signature checks alone
	SigCount  float64 `json:"signature_count"`
	Stored    float64 `json:"stored"` // notifications stored
	// The store's batches: the oldest request's wait for the writer and the transaction
	// (inserts and fsync), summed over batches.
	Batches   float64 `json:"batches"`
	WaitSum   float64 `json:"store_wait_s"`
	CommitSum float64 `json:"commit_s"`
	// Every request's wait for the store, from its queuing to its batch's commit: what
	// the batch-weighted WaitSum understates when batches grow in a stall.
	Appends   float64 `json:"appends"`
	AppendSum float64 `json:"append_s"`
	CPU       float64 `json:"cpu_s"`   // the hub's CPU time (user + system)
	RSSMiB    float64 `json:"rss_mib"` // at the end of the window
	// StoreCPU is the CPU time of the PostgreSQL server the lab started (0 otherwise:
	// SQLite's work is in the hub's own CPU time), StorePSSMiB its memory at the end of
	// the window (PSS: its processes share their buffers, which RSS would count in each).
	StoreCPU    float64 `json:"store_cpu_s"`
	StorePSSMiB float64 `json:"store_pss_mib"`
}

func (h HubWindow) minus(o HubWindow) HubWindow {
	return HubWindow{Inserts: h.Inserts - o.Inserts, InsertSum: h.InsertSum - o.InsertSum, JWTCount: h.JWTCount - o.JWTCount,
		JWTSum: h.JWTSum - o.JWTSum, SigSum: h.SigSum - o.SigSum, SigCount: h.SigCount - o.SigCount,
		Stored: h.Stored - o.Stored, Batches: h.Batches - o.Batches, WaitSum: h.WaitSum - o.WaitSum, CommitSum: h.CommitSum - o.CommitSum,
		Appends: h.Appends - o.Appends, AppendSum: h.AppendSum - o.AppendSum,
		CPU: h.CPU - o.CPU, StoreCPU: h.StoreCPU - o.StoreCPU}
}

// HandlerMillis is the mean time the hub took to answer a notification.
func (h HubWindow) HandlerMillis() float64 { return mean(h.InsertSum, h.Inserts) / 1e3 }

// WaitMillis is the mean wait of a batch's oldest notification for the store's writer.
func (h HubWindow) WaitMillis() float64 { return mean(h.WaitSum, h.Batches) / 1e3 }

// AppendMillis is the mean time a request waited for the store: queue and commit.
func (h HubWindow) AppendMillis() float64 { return mean(h.AppendSum, h.Appends) / 1e3 }

// CommitMillis is the mean time of one batch's transaction.
func (h HubWindow) CommitMillis() float64 { return mean(h.CommitSum, h.Batches) / 1e3 }

// BatchSize is the mean number of notifications per batch.
func (h HubWindow) BatchSize() float64 {
	if h.Batches <= 0 {
		return 0
	}
	return h.Stored / h.Batches
}

// JWTMicros is the mean whole token processing time.
func (h HubWindow) JWTMicros() float64 { return mean(h.JWTSum, h.JWTCount) }

// SigMicros is the mean signature check time.
func (h HubWindow) SigMicros() float64 { return mean(h.SigSum, h.SigCount) }

func mean(sum, n float64) float64 {
	if n <= 0 {
		return 0
	}
	return sum / n * 1e6
}

// scrape reads the hub's counters from its /metrics.
func scrape(ctx context.Context, url string) (HubWindow, error) {
	var h HubWindow
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return h, fmt.Errorf("hub metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return h, fmt.Errorf("hub metrics: %s", resp.Status)
	}
	samples, err := parseExposition(resp.Body)
	if err != nil {
		return h, fmt.Errorf("hub metrics: %w", err)
	}
	// A histogram is NAME_sum and NAME_count; a counter is NAME.
	for _, m := range samples {
		switch m.name {
		case "iotsafe_rest_request_seconds_count":
			if m.labels["route"] == insertRoute {
				h.Inserts += m.value
			}
		case "iotsafe_rest_request_seconds_sum":
			if m.labels["route"] == insertRoute {
				h.InsertSum += m.value
			}
		case "iotsafe_jwt_verify_seconds_count":
			h.JWTCount += m.value
		case "iotsafe_jwt_verify_seconds_sum":
			h.JWTSum += m.value
		case "iotsafe_jwt_signature_seconds_count":
			h.SigCount += m.value
		case "iotsafe_jwt_signature_seconds_sum":
			h.SigSum += m.value
		case "iotsafe_rest_notifications_stored_total":
			h.Stored += m.value
		case "iotsafe_telemetry_queue_wait_seconds_sum":
			h.WaitSum += m.value
		case "iotsafe_telemetry_append_seconds_count":
			h.Appends += m.value
		case "iotsafe_telemetry_append_seconds_sum":
			h.AppendSum += m.value
		case "iotsafe_telemetry_commit_seconds_count":
			h.Batches += m.value
		case "iotsafe_telemetry_commit_seconds_sum":
			h.CommitSum += m.value
		}
	}
	return h, nil
}
