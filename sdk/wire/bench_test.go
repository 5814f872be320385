package wire_test

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"

	"danmaku/sdk/wire"
)

// Realistic content for size benchmarks: Chinese comments of 10-20
// characters, 6-character nicknames, short avatar codes, stream ids.
var (
	benchTexts = []string{
		"前方高能预警大家准备好了吗",
		"这首歌真的太好听了单曲循环",
		"主播今天状态超级好啊啊啊啊啊",
		"从第一场演唱会就开始追了真的",
		"弹幕护体所有人都给我冲冲冲冲",
		"现场的朋友们声音大一点好不好呀",
		"这个高音绝了鸡皮疙瘩都起来了",
		"泪目了青春回来了谢谢你们一直都在",
		"我宣布这是今年最好看的舞台",
		"有没有一起熬夜看直播的朋友",
	}
	benchNicks = []string{"快乐小王子啊", "追光的少年郎", "今天也要加油", "星星点灯照亮", "橘子汽水味道", "深夜听歌的人"}
	benchGifts = []string{"heart", "rocket", "star", "cake"}
)

func benchMessages(n int) []wire.Message {
	r := rand.New(rand.NewPCG(1, 2))
	const base = 1700000000000
	out := make([]wire.Message, n)
	for i := range out {
		ms := base + int64(i*1000/n)
		m := wire.Message{
			ID:     wire.FormatID(ms, uint64(r.IntN(3))),
			Kind:   wire.KindBarrage,
			User:   "u" + strconv.Itoa(10000000+r.IntN(89999999)),
			Nick:   benchNicks[r.IntN(len(benchNicks))],
			Avatar: "a" + strconv.FormatInt(int64(r.IntN(36*36)), 36),
			Text:   benchTexts[r.IntN(len(benchTexts))],
		}
		if i%10 == 9 { // one message in ten is a gift
			m.Kind = wire.KindGift
			m.Text = ""
			m.Gift = benchGifts[r.IntN(len(benchGifts))]
			m.Value = int64(100 * (1 + r.IntN(50)))
			m.Order = "order-" + strconv.Itoa(i)
		}
		out[i] = wire.Slim(m)
	}
	return out
}

func benchSegment(n int) *wire.Segment {
	return &wire.Segment{V: wire.Version, Room: "concert_2024", Second: 1700000000, Seq: 3600, Dur: wire.SegmentDuration, Messages: benchMessages(n)}
}

func BenchmarkEncodeSegment(b *testing.B) {
	for _, n := range []int{60, 1200} {
		b.Run("msgs="+strconv.Itoa(n), func(b *testing.B) {
			seg := benchSegment(n)
			b.ReportAllocs()
			var size int
			for b.Loop() {
				out, err := wire.EncodeSegment(seg)
				if err != nil {
					b.Fatal(err)
				}
				size = len(out)
			}
			b.SetBytes(int64(size))
			b.ReportMetric(float64(size)/float64(n), "bytes/msg")
		})
	}
}

func BenchmarkDecodeSegment(b *testing.B) {
	for _, n := range []int{60, 1200} {
		b.Run("msgs="+strconv.Itoa(n), func(b *testing.B) {
			enc, err := wire.EncodeSegment(benchSegment(n))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := wire.DecodeSegment(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSegmentVsJSON compares the size of one second as a msgpack
// segment with the same structs as encoding/json output.
func BenchmarkSegmentVsJSON(b *testing.B) {
	for _, n := range []int{60, 1200} {
		b.Run("msgs="+strconv.Itoa(n), func(b *testing.B) {
			seg := benchSegment(n)
			var mp, js []byte
			for b.Loop() {
				var err error
				if mp, err = wire.EncodeSegment(seg); err != nil {
					b.Fatal(err)
				}
				if js, err = json.Marshal(seg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(mp)), "msgpack-bytes")
			b.ReportMetric(float64(len(js)), "json-bytes")
			b.ReportMetric(float64(len(js))/float64(len(mp)), "json/msgpack")
		})
	}
}
