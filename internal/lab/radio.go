package lab

import "time"

// The device radio of the labs' energy figures: an AT86RF233 802.15.4 transceiver
// (Atmel 8351 datasheet, typical at 3.0 V: BUSY_TX at +4 dBm 13.8 mA, RX_ON 11.8 mA).
// The papers report energy relative to a baseline, so these constants cancel in their
// figures; they are here so the joules are meaningful.
const (
	radioVolts = 3.0
	radioTXmA  = 13.8
	radioRXmA  = 11.8
)

// RadioJoules is the radio's energy for tx of sending and rx of receiving.
func RadioJoules(tx, rx time.Duration) float64 {
	return radioVolts * (tx.Seconds()*radioTXmA + rx.Seconds()*radioRXmA) / 1000
}
