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

// The documented xmlsec1 route (issue 55.7; docs/soap.md): the keys from 'iotsafe soap
// derive-keys', the template of docs/soap.md filled in, encrypted and signed by the real
// xmlsec1, made compact by 'soap from-classic', posted with curl: the hub stores it.
func TestSOAPXmlsec1TemplateThroughTheHub(t *testing.T) {
	needTool(t, "xmlsec1")
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nsoap: {enabled: true}\n")
	h.log.wait(t, "SOAP endpoint on the front door")
	h.addDevice("dev1")
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "dev1.soapkey")
	h.mustCLI("device", "soap-key", "rotate", "dev1", "--out", keyFile)
	b, _ := os.ReadFile(keyFile)
	keyID, _, _ := strings.Cut(strings.TrimSpace(string(b)), ":")
	if out := h.mustCLI("soap", "derive-keys", "--key-file", keyFile, "--alg", "aes128-gcm", "--out", dir); !strings.Contains(out, "mac.bin (MAC, 32 bytes)") {
		t.Fatalf("derive-keys: %s", out)
	}
	url := "https://" + fdDomain + ":" + portOf(h.front) + soap.Path
	// The template of docs/soap.md, its placeholders filled in.
	doc := strings.NewReplacer("URL", url, "KEYID", keyID, "CREATED", time.Now().UTC().Format(wssec.TimeLayout), "MSGID", "urn:uuid:"+wssec.NewMessageID()[9:]).Replace(soapTemplateDoc)
	os.WriteFile(filepath.Join(dir, "doc.xml"), []byte(doc), 0o600)
	os.WriteFile(filepath.Join(dir, "tmpl.xml"), []byte(strings.ReplaceAll(soapTemplateEnc, "KEYID", keyID)), 0o600)
	ids := []string{"--id-attr:Id", wssec.SOAPNS + ":Body", "--id-attr:Id", wssec.WSANS + ":To", "--id-attr:Id", wssec.WSANS + ":Action",
		"--id-attr:Id", wssec.WSANS + ":MessageID", "--id-attr:Id", wssec.WSUNS + ":Timestamp"}
	run := func(args ...string) {
		c := exec.Command("xmlsec1", args...)
		c.Dir = dir
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("xmlsec1 %v: %v\n%s", args, err, out)
		}
	}
	run("--encrypt", "--aeskey:"+keyID, "enc.bin", "--xml-data", "doc.xml", "--node-name", wssec.SOAPNS+":Body", "--output", "enc.xml", "tmpl.xml")
	run(append(append([]string{"--sign", "--hmackey:" + keyID, "mac.bin"}, ids...), "--output", "signed.xml", "enc.xml")...)
	compact, err := h.cliCommand("soap", "from-classic", filepath.Join(dir, "signed.xml")).Output()
	if err != nil {
		t.Fatalf("soap from-classic: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "compact.xml"), compact, 0o600)
	ca := filepath.Join(dir, "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	got, _ := exec.Command(needTool(t, "curl"), "-sS", "--cacert", ca, "--resolve", fdDomain+":"+portOf(h.front)+":127.0.0.1",
		"-H", "Content-Type: application/soap+xml", "--data-binary", "@"+filepath.Join(dir, "compact.xml"), "-w", "\nHTTP %{http_code}", url).CombinedOutput()
	if !strings.HasSuffix(string(got), "HTTP 200") {
		t.Fatalf("the xmlsec1 message through the hub:\n%s", got)
	}
}

// The template of docs/soap.md ("Signing and encrypting with xmlsec1"): the document, and
// the EncryptedData template for the Body.
const (
	soapTemplateDoc = `<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:a="http://www.w3.org/2005/08/addressing" xmlns:u="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"><s:Header>` +
		`<a:To u:Id="to">URL</a:To><a:Action u:Id="ac">urn:iotsafe:soap:1/Notify</a:Action><a:MessageID u:Id="id">MSGID</a:MessageID>` +
		`<wsse:Security xmlns:wsse="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"><u:Timestamp u:Id="ts"><u:Created>CREATED</u:Created></u:Timestamp>` +
		`<ds:Signature xmlns:ds="http://www.w3.org/2000/09/xmldsig#"><ds:SignedInfo><ds:CanonicalizationMethod Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/><ds:SignatureMethod Algorithm="http://www.w3.org/2001/04/xmldsig-more#hmac-sha256"/>` +
		`<ds:Reference URI="#to"><ds:Transforms><ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/></ds:Transforms><ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue/></ds:Reference>` +
		`<ds:Reference URI="#ac"><ds:Transforms><ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/></ds:Transforms><ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue/></ds:Reference>` +
		`<ds:Reference URI="#id"><ds:Transforms><ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/></ds:Transforms><ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue/></ds:Reference>` +
		`<ds:Reference URI="#ts"><ds:Transforms><ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/></ds:Transforms><ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue/></ds:Reference>` +
		`<ds:Reference URI="#b"><ds:Transforms><ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/></ds:Transforms><ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue/></ds:Reference>` +
		`</ds:SignedInfo><ds:SignatureValue/><ds:KeyInfo><ds:KeyName>KEYID</ds:KeyName></ds:KeyInfo></ds:Signature></wsse:Security>` +
		`</s:Header><s:Body u:Id="b"><n:Notification xmlns:n="urn:iotsafe:soap:1" name="temperature"><n:celsius>21.0</n:celsius></n:Notification></s:Body></s:Envelope>`
	soapTemplateEnc = `<xenc:EncryptedData xmlns:xenc="http://www.w3.org/2001/04/xmlenc#" Type="http://www.w3.org/2001/04/xmlenc#Content"><xenc:EncryptionMethod Algorithm="http://www.w3.org/2009/xmlenc11#aes128-gcm"/>` +
		`<ds:KeyInfo xmlns:ds="http://www.w3.org/2000/09/xmldsig#"><ds:KeyName>KEYID</ds:KeyName></ds:KeyInfo><xenc:CipherData><xenc:CipherValue/></xenc:CipherData></xenc:EncryptedData>`
)
