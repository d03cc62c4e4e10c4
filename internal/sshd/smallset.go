package sshd

// A device has one session and one or a few aliases, but a hub holds one set of them
// per device: at 100,000 devices behind gateways, a Go map each (about 250 bytes even
// for one entry) was a third of the centre's memory per device. These keep a few
// entries in a slice and switch to a map only for sessions with many aliases (a
// gateway device of the hub lab holds 10,000).

// manyForwards is where a forwardSet switches to a map.
const manyForwards = 8

// forwardSet maps alias to forward. The zero value is empty and ready.
type forwardSet struct {
	few  []*forward
	many map[string]*forward
}

func (fs *forwardSet) get(alias string) *forward {
	if fs.many != nil {
		return fs.many[alias]
	}
	for _, f := range fs.few {
		if f.alias == alias {
			return f
		}
	}
	return nil
}

// set stores f under its alias, replacing another forward of that alias.
func (fs *forwardSet) set(f *forward) {
	if fs.many != nil {
		fs.many[f.alias] = f
		return
	}
	for i, o := range fs.few {
		if o.alias == f.alias {
			fs.few[i] = f
			return
		}
	}
	if len(fs.few) < manyForwards {
		fs.few = append(fs.few, f)
		return
	}
	fs.many = make(map[string]*forward, 2*manyForwards)
	for _, o := range fs.few {
		fs.many[o.alias] = o
	}
	fs.many[f.alias] = f
	fs.few = nil
}

// del removes the alias's forward if it is f (nil: whatever it is) and reports whether
// it removed one.
func (fs *forwardSet) del(alias string, f *forward) bool {
	if fs.many != nil {
		if o, ok := fs.many[alias]; ok && (f == nil || o == f) {
			delete(fs.many, alias)
			return true
		}
		return false
	}
	for i, o := range fs.few {
		if o.alias == alias && (f == nil || o == f) {
			fs.few = append(fs.few[:i], fs.few[i+1:]...)
			if len(fs.few) == 0 {
				fs.few = nil
			}
			return true
		}
	}
	return false
}

func (fs *forwardSet) len() int { return len(fs.few) + len(fs.many) }

// each calls fn for every forward (in no particular order); fn must not change fs.
func (fs *forwardSet) each(fn func(*forward)) {
	for _, f := range fs.few {
		fn(f)
	}
	for _, f := range fs.many {
		fn(f)
	}
}

// all returns the forwards (a copy).
func (fs *forwardSet) all() []*forward {
	out := make([]*forward, 0, fs.len())
	fs.each(func(f *forward) { out = append(out, f) })
	return out
}

// sessionSet is a device's live sessions: almost always one.
type sessionSet []*session

func (s *sessionSet) add(x *session) { *s = append(*s, x) }

func (s *sessionSet) remove(x *session) {
	for i, o := range *s {
		if o == x {
			*s = append((*s)[:i], (*s)[i+1:]...)
			break
		}
	}
	if len(*s) == 0 {
		*s = nil
	}
}
