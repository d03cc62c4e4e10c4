package wssecbench

// paperRow is one row of paper 001's tables II-V: cases 1-3, request (tx) sizes in bytes
// (the SOAP envelope for the message-security rows, the TCP payload for TLS, the
// envelope with its HTTP header for plain SOAP) and round-trip medians in ms (a desktop
// client and a 100 MHz embedded server over Ethernet, so compare ratios, not ms).
type paperRow struct {
	Label string
	TX    [3]int
	RTT   [3]float64
}

// paper maps this lab's variants to the paper's nearest rows. The paper's TLS rows used
// record compression, which no longer exists (see NotReproducible), and RC4 in TLS,
// which is prohibited (RFC 7465): those have no counterpart here.
var paper = map[string]paperRow{
	"soap":                   {"No security (SOAP + HTTP)", [3]int{382, 427, 601}, [3]float64{16.7, 17.0, 17.6}},
	"tls1.2-aes128-cbc-sha":  {"TLS AES (compressed)", [3]int{245, 261, 309}, [3]float64{20.0, 20.6, 24.8}},
	"csec-aes128-cbc-sha1":   {"WS CSec AES", [3]int{777, 841, 1077}, [3]float64{39.1, 40.1, 51.8}},
	"csec-rc4-sha1":          {"WS CSec RC4", [3]int{749, 809, 1041}, [3]float64{29.4, 30.2, 41.1}},
	"secrec-aes128-cbc-sha1": {"WS SecRec AES", [3]int{524, 588, 820}, [3]float64{28.5, 29.9, 40.5}},
	"secrec-rc4-sha1":        {"WS SecRec RC4", [3]int{508, 568, 800}, [3]float64{21.6, 22.4, 31.8}},
}

// paperTable1 is table I: Body and Envelope sizes of the unsecured messages, tx and rx.
var paperTable1 = map[string][4]int{"1": {89, 107, 218, 236}, "2": {134, 152, 263, 281}, "3": {308, 326, 437, 455}}

// paperTable6 is table VI (WS-SecRec RC4, case 2, chunk 1024): request bytes and round
// trip in ms by deflate level.
var paperTable6 = [10][2]float64{{871, 31.1}, {599, 38.0}, {597, 37.9}, {597, 38.1}, {589, 38.5}, {591, 38.8}, {591, 38.7}, {591, 38.7}, {591, 38.7}, {591, 38.7}}
