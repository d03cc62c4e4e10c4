# A SOAP integrator's client: zeep reads the hub's WSDL over HTTPS (the hub's CA), and
# calls Notify through the local gateway ('iotsafe soap gateway'), which seals it as the
# device. Prints the hub's NotificationAck.
import sys

import requests
from lxml import etree
from zeep import Client, Settings
from zeep.transports import Transport

wsdl, cafile, gateway = sys.argv[1], sys.argv[2], sys.argv[3]
session = requests.Session()
session.verify = cafile
client = Client(wsdl, transport=Transport(session=session), settings=Settings(strict=True))
service = client.create_service("{urn:iotsafe:soap:1}NotificationsSoap12", gateway)
celsius = etree.Element("{urn:iotsafe:soap:1}celsius")
celsius.text = "22.5"
ack = service.Notify(celsius, name="temperature")
print("ack id=%s timestamp=%s" % (ack["id"], ack["timestamp"]), flush=True)
