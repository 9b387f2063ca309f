// 10,000 records from one tool call, filtered, grouped, summed and sorted.
async () => {
  const rows = await store.orders();
  const totals = {};
  for (const row of rows.filter((r) => r.open)) totals[row.region] = (totals[row.region] ?? 0) + row.amount;
  return Object.entries(totals).sort((a, b) => b[1] - a[1]).map(([region, total]) => region + ': ' + total);
}
