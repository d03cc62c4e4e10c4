"""Verify and decrypt a classic WS-Security message as Python's libraries do: signxml
verifies the XML Signature, python-xmlsec (libxmlsec1's bindings) verifies it again and
decrypts the EncryptedData. Usage: classic_check.py FILE MAC_KEY_HEX ENC_KEY_HEX.
Prints the decrypted Body; exits non-zero when anything does not verify."""
import sys
from lxml import etree
import xmlsec
from signxml import XMLVerifier, SignatureConfiguration, SignatureMethod, DigestAlgorithm

path, mac_hex, enc_hex = sys.argv[1], sys.argv[2], sys.argv[3]
mac, enc = bytes.fromhex(mac_hex), bytes.fromhex(enc_hex)
data = open(path, "rb").read()
cfg = SignatureConfiguration(require_x509=False, expect_references=5,
    signature_methods=frozenset({SignatureMethod.HMAC_SHA256, SignatureMethod.HMAC_SHA1}),
    digest_algorithms=frozenset({DigestAlgorithm.SHA256, DigestAlgorithm.SHA1}))
res = XMLVerifier().verify(data, hmac_key=mac, expect_config=cfg, id_attribute="Id")
print("signxml: verified", len(res), "references")
root = etree.fromstring(data)
xmlsec.tree.add_ids(root, ["Id"])
sig = xmlsec.tree.find_node(root, xmlsec.constants.NodeSignature)
ctx = xmlsec.SignatureContext()
ctx.key = xmlsec.Key.from_binary_data(xmlsec.constants.KeyDataHmac, mac)
ctx.verify(sig)
print("python-xmlsec: verified")
ed = root.find(".//{http://www.w3.org/2001/04/xmlenc#}EncryptedData")
ectx = xmlsec.EncryptionContext()
ectx.key = xmlsec.Key.from_binary_data(xmlsec.constants.KeyDataAes, enc)
out = ectx.decrypt(ed)
print("python-xmlsec: decrypted", etree.tostring(out).decode() if hasattr(out, "tag") else out)
