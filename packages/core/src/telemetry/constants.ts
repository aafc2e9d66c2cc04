/** SpanKind and SpanStatusCode of the OpenTelemetry API (numbers fixed by the specification). */
export const SpanKind = { INTERNAL: 0, CONSUMER: 4 } as const;
export const SpanStatus = { UNSET: 0, OK: 1, ERROR: 2 } as const;
