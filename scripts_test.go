package fencedlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestScriptsRunAfterTheScriptCacheIsFlushed flushes the server's script
// cache before each call: every script is sent again with EVAL when
// EVALSHA answers NOSCRIPT (a restart or SCRIPT FLUSH), and the call
// succeeds.
func TestScriptsRunAfterTheScriptCacheIsFlushed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, be *redistest.Backend) {
		ctx := context.Background()
		l := fencedlock.New(be.Client, fencedlock.WithPrefix(be.Prefix))
		flush := func() {
			t.Helper()
			if err := be.Client.ScriptFlush(ctx).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
		}
		flush()
		lock, err := l.TryAcquire(ctx, "flushed", time.Minute)
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		flush()
		if err := lock.Refresh(ctx, time.Minute); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		flush()
		if ttl, err := lock.TTL(ctx); err != nil || ttl <= 0 {
			t.Fatalf("TTL = %v, %v; want a positive TTL", ttl, err)
		}
		flush()
		store := fencedlock.NewRedisStore(be.Client, fencedlock.WithStorePrefix(be.Prefix))
		if err := store.Put(ctx, "flushed", lock.Token(), []byte("v")); err != nil {
			t.Fatalf("Put: %v", err)
		}
		flush()
		if err := lock.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		flush()
		external := be.Prefix + ":external"
		if err := be.Client.Set(ctx, external, "owner", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.IssueToken(ctx, external, "owner"); err != nil {
			t.Fatalf("IssueToken: %v", err)
		}
		flush()
		if err := l.Advance(ctx, "flushed", lock.Token()+1000); err != nil {
			t.Fatalf("Advance: %v", err)
		}
		next, err := l.TryAcquire(ctx, "flushed", time.Minute)
		if err != nil {
			t.Fatalf("TryAcquire after Advance: %v", err)
		}
		if next.Token() <= lock.Token()+1000 {
			t.Fatalf("token after Advance(%d) = %d; want above it", lock.Token()+1000, next.Token())
		}
	})
}
