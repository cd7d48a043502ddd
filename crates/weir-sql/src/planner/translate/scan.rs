//! Leaves: table scans, `VALUES` and empty relations.

use super::*;

impl Planner {
    /// A table read: one scan node per table (shared by every read of it), the
    /// projection as a step.
    pub(super) fn translate_scan(
        &self,
        scan: &datafusion::logical_expr::TableScan,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        let provider = datafusion::datasource::source_as_provider(&scan.source).ok();
        if let Some(m) = provider
            .as_ref()
            .and_then(|p| p.downcast_ref::<super::super::match_recognize::MatchTable>())
        {
            return self.translate_match(m, scan, nodes);
        }
        let table = table_of_scan(scan).ok_or_else(|| {
            Error::plan(format!(
                "'{}' cannot be read in streaming mode",
                scan.table_name
            ))
        })?;
        // Filters pushed into the scan are inexact (for batch scans); the filter above the
        // scan applies them.
        let computed = computed_physical(&table)?;
        let watermark = match &table.watermark {
            None => None,
            Some((_, e)) => {
                let schema = DFSchema::try_from_qualified_schema(FULL, &table.schema)?;
                Some(self.physical(e, &schema)?)
            }
        };
        // A table read more than once by a query (a self-join, HOP's copies, the
        // nexmark views over one source) is read once and fanned out.
        let existing = nodes
            .iter()
            .position(|n| matches!(n, PlanNode::Scan { table: t, .. } if Arc::ptr_eq(t, &table)));
        let scan_node = match existing {
            Some(n) => n,
            None => {
                nodes.push(PlanNode::Scan {
                    table: table.clone(),
                    computed,
                    watermark,
                });
                nodes.len() - 1
            }
        };
        // A fetch pushed into the scan is the Limit above it: nothing to do here.
        Ok((scan_node, projection_step(&table.schema, scan)?))
    }

    /// `MATCH_RECOGNIZE` (its placeholder table): the clause's input, then the match node.
    fn translate_match(
        &self,
        m: &super::super::match_recognize::MatchTable,
        scan: &datafusion::logical_expr::TableScan,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        let optimized = self.ctx.state().optimize(&m.input).map_err(plan_error)?;
        let input = self.translate_into_node(&optimized, nodes)?;
        let time = m.program.time;
        let processing_time = crate::plan::is_processing_time(nodes, input, time);
        if !processing_time && !crate::plan::is_time_attribute(nodes, input, time) {
            return Err(Error::plan(format!(
                "MATCH_RECOGNIZE ORDER BY '{}': the first ORDER BY column must be a time attribute \
                 (a WATERMARK column or PROCTIME()), as in Flink",
                m.program.input_schema.field(time).name()
            )));
        }
        if let Some(producer) = crate::plan::updates_in(nodes, input) {
            return Err(Error::plan(format!(
                "MATCH_RECOGNIZE over an updating input ({producer}) is not supported (as in Flink)"
            )));
        }
        nodes.push(PlanNode::MatchRecognize {
            input,
            program: m.program.clone(),
            processing_time,
        });
        Ok((nodes.len() - 1, projection_step(&m.program.schema, scan)?))
    }

    /// `SELECT 1` (one row of no columns, for the projection above) or a relation the
    /// optimizer proved empty.
    pub(super) fn translate_empty(
        &self,
        empty: &datafusion::logical_expr::EmptyRelation,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        // `SELECT 1` (one row of no columns, for the projection above) or a
        // relation the optimizer proved empty.
        let rows = usize::from(empty.produce_one_row);
        let batch = arrow::array::RecordBatch::try_new_with_options(
            Arc::new(empty.schema.as_arrow().clone()),
            empty
                .schema
                .fields()
                .iter()
                .map(|f| arrow::array::new_null_array(f.data_type(), rows))
                .collect(),
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows)),
        )?;
        nodes.push(PlanNode::Values { batch });
        Ok((nodes.len() - 1, Vec::new()))
    }

    /// `VALUES …`, evaluated once, here.
    pub(super) fn translate_values(
        &self,
        values: &datafusion::logical_expr::Values,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        // Evaluated once, here: one row of no columns to evaluate constants on.
        let schema = Arc::new(values.schema.as_arrow().clone());
        let one = arrow::array::RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            Vec::new(),
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let empty = DFSchema::empty();
        let mut columns = Vec::new();
        for (c, field) in schema.fields().iter().enumerate() {
            let mut cells = Vec::new();
            for row in &values.values {
                let array = self
                    .physical(&row[c], &empty)?
                    .evaluate(&one)
                    .and_then(|v| v.into_array(1))
                    .map_err(plan_error)?;
                cells.push(arrow::compute::cast(&array, field.data_type())?);
            }
            let refs: Vec<&dyn arrow::array::Array> = cells.iter().map(|a| a.as_ref()).collect();
            columns.push(arrow::compute::concat(&refs)?);
        }
        let schema = Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        let batch = arrow::array::RecordBatch::try_new(schema, columns)?;
        nodes.push(PlanNode::Values { batch });
        Ok((nodes.len() - 1, Vec::new()))
    }
}

/// The projection pushed into a scan of `schema`'s columns, as a step (none when it keeps
/// every column in place).
fn projection_step(
    schema: &SchemaRef,
    scan: &datafusion::logical_expr::TableScan,
) -> Result<Vec<CalcStep>> {
    let Some(projection) = &scan.projection else {
        return Ok(Vec::new());
    };
    let identity = projection.len() == schema.fields().len()
        && projection.iter().enumerate().all(|(i, p)| i == *p);
    if identity {
        return Ok(Vec::new());
    }
    let exprs = projection
        .iter()
        .map(|&i| Arc::new(Column::new(schema.field(i).name(), i)) as PhysicalExprRef)
        .collect();
    let schema = Arc::new(schema.project(projection)?);
    Ok(vec![CalcStep::Project { exprs, schema }])
}
