package agentcmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sshext"
)

// joinCmd is 'iotsafe agent join': enrol this device with a join token. Its key pair is
// made here, and only the public key goes to the hub.
func joinCmd() *cobra.Command {
	var hub, hubKey, token, tokenFile, name, dir string
	c := &cobra.Command{
		Use:   "join --hub HOST:PORT --hub-key SHA256:... --token TOKEN --name NAME",
		Short: "Enrol this device with a join token: make its key here, enrol the public key, write agent.yaml",
		Long: `Enrol this device with a join token ('iotsafe token create' on the hub prints this
command). The device's key pair is made here, in --dir; its private key never leaves it.
The public key is enrolled over SSH under --name (which the token's name pattern must
allow), the hub's host key pinned by --hub-key. Then --dir holds NAME, NAME.pub and
agent.yaml, and the agent runs with:

  iotsafe-agent --agent-config DIR/agent.yaml --expose ALIAS=HOST:PORT ...

A refused join (the token revoked, expired or used up, a name outside its pattern or
taken) says why and leaves nothing behind.`,
		Example: `  iotsafe-agent join --hub hub.example.com:2222 --hub-key SHA256:... --token ijt_... --name sensor-0042
  iotsafe-agent join --hub hub:2222 --hub-key SHA256:... --token-file /run/join-token --name cam-7 --dir /etc/iotsafe`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token == "" && tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				token = strings.TrimSpace(string(b))
			}
			switch {
			case hub == "" || hubKey == "" || token == "" || name == "":
				return errors.New("join needs --hub, --hub-key, --token (or --token-file) and --name")
			case !profile.ValidName(name):
				return fmt.Errorf("--name %q: use lower-case letters, digits and '-' (at most 63)", name)
			case !strings.HasPrefix(hubKey, "SHA256:"):
				return fmt.Errorf("--hub-key %q: want the hub's host key fingerprint (SHA256:...)", hubKey)
			}
			return join(cmd, hub, hubKey, token, name, dir)
		},
	}
	fl := c.Flags()
	fl.StringVar(&hub, "hub", "", "the hub's SSH address HOST:PORT")
	fl.StringVar(&hubKey, "hub-key", "", "the hub's host key fingerprint SHA256:..., as 'iotsafe token create' printed it")
	fl.StringVar(&token, "token", "", "the join token")
	fl.StringVar(&tokenFile, "token-file", "", "read the join token from FILE (not on the command line, where other local users see it)")
	fl.StringVar(&name, "name", "", "this device's name, within the token's name pattern")
	fl.StringVar(&dir, "dir", ".", "where the key pair and agent.yaml are written")
	return c
}

// join makes the key, enrols it and writes the agent's files; on a refusal it removes
// the key it made.
func join(cmd *cobra.Command, hub, hubKey, token, name, dir string) error {
	keyPath := filepath.Join(dir, name)
	cfgPath := filepath.Join(dir, "agent.yaml")
	if _, err := os.Stat(cfgPath); err == nil {
		return fmt.Errorf("%s exists: this device has joined already (remove it to join again)", cfgPath)
	}
	pub, err := agent.GenerateKeyPair(keyPath, name)
	if err != nil {
		return fmt.Errorf("the device key: %w", err)
	}
	ans, err := enrol(hub, hubKey, token, name, keyPath)
	if err != nil {
		os.Remove(keyPath)
		os.Remove(keyPath + ".pub")
		return err
	}
	conf := map[string]string{"hub": hub, "device": ans.Device, "key": keyPath, "hub_key": hubKey}
	if len(ans.HostCAs) > 0 {
		// Learned over the pinned session: trust every hub of the deployment by its CA.
		delete(conf, "hub_key")
		conf["hub_ca"] = strings.Join(ans.HostCAs, "\n")
	}
	b, _ := yaml.Marshal(conf)
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "joined as %s (profile %s), key %s made here (%s)\n", ans.Device, ans.Profile, keyPath, ssh.FingerprintSHA256(pub))
	if ans.Pending {
		fmt.Fprintf(w, "the hub's operator approves it ('iotsafe device approve %s'); until then the agent is refused and retries\n", ans.Device)
	}
	fmt.Fprintf(w, "start the agent:  iotsafe-agent --agent-config %s --expose ALIAS=HOST:PORT ...\n", cfgPath)
	return nil
}

// enrol runs the join command on the hub as sshext.JoinUser with the new key.
func enrol(hub, hubKey, token, name, keyPath string) (sshext.JoinAnswer, error) {
	var ans sshext.JoinAnswer
	raw, err := os.ReadFile(keyPath)
	if err != nil {
		return ans, err
	}
	signer, err := ssh.ParsePrivateKey(raw)
	if err != nil {
		return ans, err
	}
	cfg := &ssh.ClientConfig{User: sshext.JoinUser, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, Timeout: 30 * time.Second,
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if fp := ssh.FingerprintSHA256(key); fp != hubKey {
				return fmt.Errorf("the hub's host key is %s, not %s: not joining (check --hub and --hub-key)", fp, hubKey)
			}
			return nil
		}}
	client, err := ssh.Dial("tcp", hub, cfg)
	if err != nil {
		return ans, fmt.Errorf("joining at %s: %w", hub, err)
	}
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		return ans, fmt.Errorf("joining at %s: %w", hub, err)
	}
	defer sess.Close()
	var out, errOut bytes.Buffer
	sess.Stdout, sess.Stderr = &out, &errOut
	if err := sess.Run("join " + name + " " + token); err != nil {
		if msg := strings.TrimSpace(errOut.String()); msg != "" {
			return ans, errors.New(strings.TrimPrefix(msg, "iotsafe: "))
		}
		return ans, fmt.Errorf("joining at %s: %w", hub, err)
	}
	if err := json.Unmarshal(out.Bytes(), &ans); err != nil || ans.Device != name {
		return ans, fmt.Errorf("the hub's answer is not a join's: %q", strings.TrimSpace(out.String()))
	}
	return ans, nil
}
