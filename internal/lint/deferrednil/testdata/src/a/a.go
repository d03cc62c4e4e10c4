package a

import "errors"

var errBusy = errors.New("busy")

// The mistake of issue 56: the error return sets release to nil, the defer calls it.
func open(busy, fail bool) (st int, release func(), err error) {
	if busy {
		return 0, nil, errBusy // before the defer: it does not run
	}
	release = func() {}
	defer func() {
		if err != nil {
			release()
		}
	}()
	if fail {
		return 0, nil, errBusy // want `this return sets result release to nil, and the deferred closure calls it`
	}
	return 1, release, nil
}

// An interface result whose method the defer calls.
func closer(fail bool) (c interface{ Close() error }, err error) {
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if fail {
		return nil, errBusy // want `this return sets result c to nil`
	}
	return nil, nil // want `this return sets result c to nil`
}

// Guarded: the defer checks for nil first.
func guarded(fail bool) (release func(), err error) {
	defer func() {
		if err != nil && release != nil {
			release()
		}
	}()
	if fail {
		return nil, errBusy
	}
	return func() {}, nil
}

// A bare return keeps what was assigned.
func bare(fail bool) (release func(), err error) {
	release = func() {}
	defer func() {
		if err != nil {
			release()
		}
	}()
	if fail {
		err = errBusy
		return
	}
	return release, nil
}

// defer release() evaluates release when the defer runs, not at the return.
func direct() (release func(), err error) {
	release = func() {}
	defer release()
	return nil, nil
}

// A closure nested in the function has returns of its own: not this function's.
func nested() (release func(), err error) {
	release = func() {}
	defer func() { release() }()
	f := func() (func(), error) { return nil, errBusy }
	_, err = f()
	return release, err
}
