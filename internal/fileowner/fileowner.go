package fileowner

import (
	"fmt"
	"os"
	"syscall"
)

// Owner is who new files in a data folder are given to; nil leaves them the writer's.
type Owner struct{ uid, gid int }

// Of is dir's owner when the writer is root and dir belongs to someone else; nil
// otherwise (nothing to change).
func Of(dir string) (*Owner, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("fileowner: %w", err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 || int(sys.Uid) == 0 && int(sys.Gid) == 0 {
		return nil, nil
	}
	return &Owner{int(sys.Uid), int(sys.Gid)}, nil
}

// Chown gives path (not what a link points to) to o; a nil o does nothing.
func (o *Owner) Chown(path string) error {
	if o == nil {
		return nil
	}
	return os.Lchown(path, o.uid, o.gid)
}
