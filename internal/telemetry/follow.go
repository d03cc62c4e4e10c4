package telemetry

import (
	"context"
	"time"
)

// followPage bounds the rows follow reads in one query.
const followPage = 4096

// followEvery is how often follow looks without being told: the fallback while the
// LISTEN connection is down (a restarted database, a cut link).
const followEvery = time.Second

// poke tells follow to look now; pokes while it is busy fold into one.
func (s *Store) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// follow feeds the feed from the shared table (PostgreSQL): every row past the last it
// published, oldest first, whenever it is poked (this hub's commit, another hub's
// NOTIFY, the listener's reconnection) or followEvery has passed. Because every hub
// commits under one lock with timestamps above the committed ones (writerLock), a row
// that becomes visible never has a timestamp below one already published: reading
// "ts > last" misses nothing.
func (s *Store) follow(ctx context.Context, last int64) {
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		var down bool
		s.db.Listen(ctx, Channel, 30*time.Second, func(string) {
			if down && s.log != nil {
				s.log.Info("telemetry change feed back: other hubs' notifications reach this hub's readers at once again")
			}
			down = false
			s.poke()
		}, func(err error) {
			if !down && s.log != nil {
				s.log.Warn("telemetry change feed lost: other hubs' notifications reach this hub's readers within a second until it is back", "err", err)
			}
			down = true
		})
	}()
	// Other hubs' command changes, on a listener of their own (command.go).
	commandsListened := make(chan struct{})
	go func() {
		defer close(commandsListened)
		s.listenCommands(ctx)
	}()
	defer func() {
		<-listened
		<-commandsListened
		close(s.followed)
	}()
	tick := time.NewTicker(followEvery)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-tick.C:
		}
		next, err := s.catchUp(ctx, last)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			if s.log != nil {
				s.log.Warn("telemetry: reading new notifications for waiting readers failed; trying again every second", "err", err)
			}
		case err == nil && failing:
			failing = false
			if s.log != nil {
				s.log.Info("telemetry: waiting readers are served again")
			}
		}
		last = next
	}
}

// catchUp publishes every row with a timestamp past last, a page at a time, and
// returns the last timestamp published.
func (s *Store) catchUp(ctx context.Context, last int64) (int64, error) {
	for {
		rows, err := s.db.QueryContext(ctx, `SELECT `+columns+` FROM notifications WHERE ts > ? ORDER BY ts LIMIT ?`, last, followPage)
		if err != nil {
			return last, err
		}
		var page []Notification
		for rows.Next() {
			n, err := scan(rows)
			if err != nil {
				rows.Close()
				return last, err
			}
			page = append(page, n)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return last, err
		}
		if len(page) == 0 {
			return last, nil
		}
		s.ownVia(page)
		s.feed.publish(page)
		last = page[len(page)-1].Timestamp.UnixMicro()
		if len(page) < followPage {
			return last, nil
		}
	}
}

// ownVia gives this hub's rows of page the Via they came in with and forgets them;
// other hubs' rows keep an empty Via. Ids rise with timestamps, so an own id at or
// below the page's last that follow never read was deleted meanwhile (a removed
// device): it is forgotten too.
func (s *Store) ownVia(page []Notification) {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	for i := range page {
		if via, mine := s.own[page[i].ID]; mine {
			page[i].Via = via
			delete(s.own, page[i].ID)
		}
	}
	lastID := page[len(page)-1].ID
	for id := range s.own {
		if id <= lastID {
			delete(s.own, id)
		}
	}
}

// markOwn records (or, after a failed commit, forgets) the ids of a batch this hub
// stores in a shared store with the path each came in on, which the table does not
// keep: follow gives them back their Via (ownVia).
func (s *Store) markOwn(batch []*appendReq, add bool) {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	for _, r := range batch {
		for _, it := range r.items {
			if add {
				s.own[it.ID] = it.Via
			} else {
				delete(s.own, it.ID)
			}
		}
	}
}
