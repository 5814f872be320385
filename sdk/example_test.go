package sdk_test

import (
	"context"
	"fmt"
	"log"

	"danmaku/sdk"
)

func Example() {
	c, err := sdk.New(sdk.Config{
		EntryURL: "https://entry.example.com",
		Room:     "concert-42",
		Ticket:   "business-ticket-from-login",
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := c.Run(ctx); err != nil {
			log.Print(err) // the ticket was refused: log in again
		}
	}()

	_ = c.Send(ctx, "hello from row 12") // queued; posted by Run

	for m := range c.Messages() { // closed when Run returns
		switch m.Kind {
		case sdk.KindGift:
			fmt.Printf("%s sent %d × %s\n", m.Nick, max(m.Count, 1), m.Gift)
		case sdk.KindSystem:
			fmt.Println("📣", m.Text)
		default:
			fmt.Println(m.Nick+":", m.Text)
		}
	}
}
