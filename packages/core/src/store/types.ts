/**
 * What the application hands to duetime and gets back. A `Message` is what a schedule delivers; an
 * `Event` is a message that happened to an aggregate, with its place in that aggregate's stream.
 */
export interface Message<Data = unknown> {
  /** What happened or what to do, e.g. `order.expire`. 1 to 512 characters. */
  type: string;
  /** The aggregate (entity) the message is about, e.g. `ORD-1`. 1 to 512 characters. */
  aggregateId: string;
  /** Any JSON data. The whole message serialises to at most 256 KiB. */
  data?: Data;
}

/** A message recorded in an aggregate's stream. */
export interface Event<Data = unknown> extends Message<Data> {
  /** 1-based position in the aggregate's stream, without gaps. */
  sequence: number;
  /** When it was raised (milliseconds since the epoch, the store's clock). */
  timestamp: number;
}

/** A pending one-shot schedule. */
export interface Schedule<Data = unknown> {
  key: string;
  /** The deadline it was scheduled for. */
  at: Date;
  message: Message<Data>;
  /**
   * Grows each time the key is scheduled and never resets, not even after the schedule is consumed or
   * cancelled, so an old version can never be mistaken for a new one (no ABA). Versions come from one
   * counter per store, so they are not consecutive per key, and no record of a deleted key is kept.
   */
  version: number;
  /** Failed delivery attempts of this version so far. */
  attempts: number;
  /** When the dispatcher may next try it: `at`, or later after failed attempts. */
  dueAt: Date;
}

/** Where a page of {@link Schedule}s ended; pass it back to get the next page. */
export interface SchedulePageCursor {
  at: number;
  key: string;
}

/** A query for a page of active schedules, ordered by deadline then key. */
export interface ScheduleQuery {
  /** Only schedules whose deadline is at or before this instant. */
  through?: Date;
  /** Only keys that start with this literal prefix. */
  prefix?: string;
  /** Continue after this position. */
  after?: SchedulePageCursor;
  /** Page size, 1 to 10,000 (default 500). */
  limit?: number;
}

export interface SchedulePage {
  items: Schedule[];
  /** Present when more items may follow. */
  next?: SchedulePageCursor;
}

/** What a local commit or a remote change notification tells listeners. */
export interface StoreChange {
  /** The earliest deadline among schedules this change created, when known. */
  earliest?: Date;
  /** True when the change came from another process through the backend's push channel. */
  remote: boolean;
}
