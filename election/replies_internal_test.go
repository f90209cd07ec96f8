package election

import "testing"

// TestScriptRepliesDecode decodes every status of announce.lua and
// keep.lua and both shapes of leader.lua's reply, and refuses what the
// scripts' headers do not give.
func TestScriptRepliesDecode(t *testing.T) {
	for n, want := range map[int64]announceReply{0: announceLost, 1: announcePublished, 2: announceUnpublished} {
		if got, err := decodeAnnounce(n); err != nil || got != want {
			t.Errorf("decodeAnnounce(%d) = %v, %v; want %v", n, got, err, want)
		}
	}
	if got, err := decodeAnnounce(3); err == nil {
		t.Errorf("decodeAnnounce(3) = %v; want an error", got)
	}
	for n, want := range map[int64]keepReply{0: keepLost, 1: keepKept, 2: keepPublished, 3: keepUnpublished} {
		if got, err := decodeKeep(n); err != nil || got != want {
			t.Errorf("decodeKeep(%d) = %v, %v; want %v", n, got, err, want)
		}
	}
	if got, err := decodeKeep(-1); err == nil {
		t.Errorf("decodeKeep(-1) = %v; want an error", got)
	}
	if got, err := decodeLeader([]any{"o:5", "5:v"}); err != nil || got != (leaderReply{lock: "o:5", record: "5:v"}) {
		t.Errorf("decodeLeader of a leader = %+v, %v", got, err)
	}
	if got, err := decodeLeader([]any{nil, nil}); err != nil || got != (leaderReply{}) {
		t.Errorf("decodeLeader of no leader = %+v, %v", got, err)
	}
	for _, res := range [][]any{nil, {"o:5"}, {int64(1), nil}, {"o:5", "5:v", nil}} {
		if got, err := decodeLeader(res); err == nil {
			t.Errorf("decodeLeader(%v) = %+v; want an error", res, got)
		}
	}
}
