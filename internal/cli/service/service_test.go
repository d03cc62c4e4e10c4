package service

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The journal is recognised by the stream itself, not by the variable alone: output
// redirected to a file by a child of a service is not the journal.
func TestOnJournal(t *testing.T) {
	dir := t.TempDir()
	journal, _ := os.Create(filepath.Join(dir, "journal"))
	other, _ := os.Create(filepath.Join(dir, "other"))
	defer journal.Close()
	defer other.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(journal.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	if !OnJournal(journal) {
		t.Error("the named stream is not recognised")
	}
	if OnJournal(other) || OnJournal(&bytes.Buffer{}) {
		t.Error("another stream taken for the journal")
	}
	t.Setenv("JOURNAL_STREAM", "garbage")
	if OnJournal(journal) {
		t.Error("a malformed JOURNAL_STREAM accepted")
	}
}
