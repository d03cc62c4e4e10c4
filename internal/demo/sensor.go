package demo

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"time"
)

// SensorApp is a simulated device application: plain HTTP, no TLS, as on a real device
// behind iotsafe. GET / returns the current readings as JSON.
func SensorApp(device string) http.Handler {
	h := fnv.New32a()
	h.Write([]byte(device))
	phase := float64(h.Sum32()%360) * math.Pi / 180
	start := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		t := time.Since(start).Seconds()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"device":        device,
			"temperature_c": math.Round((21+3*math.Sin(t/60+phase))*10) / 10,
			"humidity_pct":  math.Round((45+10*math.Cos(t/90+phase))*10) / 10,
			"uptime_s":      int(t),
		})
	})
	return mux
}
