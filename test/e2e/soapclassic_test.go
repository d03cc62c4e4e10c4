package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/soap"
	"github.com/iotsafe/iotsafe/internal/wssec"
)

// An integrator whose tools speak classic WS-Security (issue 55.6, 55.7): a message in
// the classic form, posted with curl to the hub's /soap, is refused with a fault that
// says what the hub takes and names the converter; 'iotsafe soap from-classic' turns it
// compact and the same curl stores it. 'to-classic' and 'from-classic' read files or
// standard input.
func TestSOAPClassicIntegrator(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nsoap: {enabled: true}\n")
	h.log.wait(t, "SOAP endpoint on the front door")
	h.addDevice("dev1")
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "dev1.soapkey")
	h.mustCLI("device", "soap-key", "rotate", "dev1", "--out", keyFile)
	b, _ := os.ReadFile(keyFile)
	key, err := wssec.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + fdDomain + ":" + portOf(h.front) + soap.Path
	suite, _ := wssec.SuiteByName("aes128-gcm")
	m := wssec.Message{To: url, Action: soap.ActionNotify, MessageID: wssec.NewMessageID(), Created: time.Now(),
		Body: soap.Notification("temperature", "", [][2]string{{"celsius", "19"}})}
	compact, err := wssec.Seal(wssec.CSec, m, suite, key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "compact.xml"), compact, 0o600)
	classic := filepath.Join(dir, "classic.xml")
	out, err := h.cliCommand("soap", "to-classic", filepath.Join(dir, "compact.xml")).Output()
	if err != nil || !strings.Contains(string(out), "wsse:Security") || !strings.Contains(string(out), "xenc:EncryptedData") {
		t.Fatalf("soap to-classic: %v\n%s", err, out)
	}
	os.WriteFile(classic, out, 0o600)
	ca := filepath.Join(dir, "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	// curl prints the answer, then its HTTP status on a line of its own.
	curl := func(data string) string {
		c := exec.Command(needTool(t, "curl"), "-sS", "--cacert", ca, "--resolve", fdDomain+":"+portOf(h.front)+":127.0.0.1",
			"-H", "Content-Type: application/soap+xml", "--data-binary", "@"+data, "-w", "\nHTTP %{http_code}", url)
		got, _ := c.CombinedOutput()
		return string(got)
	}
	if got := curl(classic); !strings.HasSuffix(got, "HTTP 400") || !strings.Contains(got, "OASIS WS-Security") || !strings.Contains(got, "iotsafe soap from-classic") {
		t.Fatalf("the classic form posted as is:\n%s", got)
	}
	// Converted from standard input, as in a pipe.
	conv := h.cliCommand("soap", "from-classic", "-")
	conv.Stdin, _ = os.Open(classic)
	back, err := conv.Output()
	if err != nil {
		t.Fatalf("soap from-classic: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "back.xml"), back, 0o600)
	// Stored: the hub answers 200, sealed with dev1's key.
	if got := curl(filepath.Join(dir, "back.xml")); !strings.HasSuffix(got, "HTTP 200") {
		t.Fatalf("the converted message:\n%s", got)
	}
	// What does not convert says why.
	if out, err := h.cli("soap", "from-classic", filepath.Join(dir, "compact.xml")); err == nil || !strings.Contains(out, "compact.xml:") {
		t.Fatalf("from-classic of a compact message: %v %s", err, out)
	}
}

// An integrator's SOAP tooling (issue 55.7): zeep reads the hub's WSDL (GET /soap?wsdl,
// its address the URL it was read at) and calls Notify through 'iotsafe soap gateway',
// which seals the plain envelope as the device; the hub stores it and the answer comes
// back as a NotificationAck. The gateway refuses a listen address that is not loopback.
func TestSOAPZeepThroughGateway(t *testing.T) {
	h := startHub(t, "", "rest: {listen: '127.0.0.1:0'}\nsoap: {enabled: true}\n")
	h.addDevice("dev1")
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "dev1.soapkey")
	h.mustCLI("device", "soap-key", "rotate", "dev1", "--out", keyFile)
	wsdl := "http://" + h.rest + soap.Path + "?wsdl"
	out, err := exec.Command(needTool(t, "curl"), "-sS", "--fail", wsdl).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `<soap12:address location="http://`+h.rest+soap.Path+`"/>`) {
		t.Fatalf("GET ?wsdl: %v\n%s", err, out)
	}
	if out, err := h.cli("soap", "gateway", "--key-file", keyFile, "--listen", "0.0.0.0:0"); err == nil || !strings.Contains(out, "give it a loopback address") {
		t.Fatalf("a gateway on every interface: %v %s", err, out)
	}
	gwAddr := freePort(t)
	gw := startProc(t, iotsafeBin, "soap", "gateway", "--key-file", keyFile, "--listen", gwAddr, "--data", h.data)
	gw.stderr.waitText(t, "soap gateway on http://"+gwAddr+"/")
	got, err := exec.Command(venvTool(t, "python"), "testdata/zeep_notify.py", wsdl, "/dev/null", "http://"+gwAddr+"/").CombinedOutput()
	if err != nil || !strings.Contains(string(got), "ack id=1 ") {
		t.Fatalf("zeep through the gateway: %v\n%s", err, got)
	}
	if ev := h.mustCLI("events", "--device", "dev1"); strings.Contains(ev, "soap_refused") {
		t.Fatalf("the hub refused a gateway message:\n%s", ev)
	}
}
