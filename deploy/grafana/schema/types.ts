// The Grafana types the dashboard is checked against: the dashboard model itself and the options
// of every panel plugin the dashboard uses. `node generate.mjs` turns them into dashboard.schema.json.
import type * as stat from "@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen";
import type * as timeseries from "@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen";

export type { Dashboard, Panel, RowPanel } from "@grafana/schema/dist/esm/veneer/dashboard.types";
// Aliases, not `export { X as Y }`: the generator finds roots by declared name.
export type TimeSeriesOptions = timeseries.Options;
export type TimeSeriesFieldConfig = timeseries.FieldConfig;
export type StatOptions = stat.Options;
